//go:build 386 || amd64 || amd64p32 || alpha || arm || arm64 || loong64 || mips64le || mips64p32le || mipsle || nios2 || ppc64le || riscv || riscv64 || sh || wasm

package store

// pairKey is the longest key a pair of entries holds: the first entry's k
// and the second's tat and the low 7 bytes of its meta, whose top byte (the
// flags) marks it free. On a little-endian machine that byte is the last of
// the pair's first 48.
const pairKey = 31
