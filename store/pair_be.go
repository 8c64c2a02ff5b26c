//go:build !(386 || amd64 || amd64p32 || alpha || arm || arm64 || loong64 || mips64le || mips64p32le || mipsle || nios2 || ppc64le || riscv || riscv64 || sh || wasm)

package store

// pairKey: on a big-endian machine meta's top byte comes first, in the
// middle of where a pair's key would run, so there are no pairs: keys
// longer than inlineKey go to the arena.
const pairKey = inlineKey
