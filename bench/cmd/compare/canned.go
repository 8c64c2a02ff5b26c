package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/cellserver/cellserver/bench"
)

// cannedArg, as the first argument, runs this program as the canned-reply
// server (bench.Canned) instead of the harness: the harness starts it as a
// process of its own so that its CPU is measured apart, as every server's.
const cannedArg = "canned-server"

// cannedMain serves bench.Canned: --addr, and a --reply NAME=HEX per command.
func cannedMain(args []string) int {
	fs := flag.NewFlagSet(cannedArg, flag.ContinueOnError)
	addr := fs.String("addr", "", "loopback host:port")
	replies := map[string][]byte{}
	fs.Func("reply", "NAME=HEX: the reply to every command called NAME", func(s string) error {
		name, h, ok := strings.Cut(s, "=")
		b, err := hex.DecodeString(h)
		if !ok || err != nil || name == "" {
			return fmt.Errorf("want NAME=HEX, got %q", s)
		}
		replies[name] = b
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench.ServeCanned(ctx, *addr, bench.NewCanned(replies)); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	return 0
}

// startCanned records, from the cellserver at src, its reply to each
// command of argvs (each key's __rand_int__ as zeros, a fresh key), and
// starts a canned server answering with it every call of the same name
// whose key has the same prefix up to its first colon (fw:, swc:, ...).
func (e *env) startCanned(src string, argvs [][]string) (*bench.Proc, []string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	port, err := bench.FreePort()
	if err != nil {
		return nil, nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{cannedArg, "--addr", addr}
	var shown []string
	for _, argv := range argvs {
		name := argv[0]
		if len(argv) > 1 {
			if i := strings.IndexByte(argv[1], ':'); i >= 0 {
				name += " " + argv[1][:i+1]
			}
		}
		a := make([]string, len(argv))
		for i, x := range argv {
			a[i] = strings.ReplaceAll(x, "__rand_int__", "000000000000")
		}
		v, err := bench.One(src, a...)
		if err != nil {
			return nil, nil, fmt.Errorf("recording %s: %w", name, err)
		}
		if v.Kind == '-' {
			return nil, nil, fmt.Errorf("recording %s: %s", name, v)
		}
		b := v.AppendRESP(nil)
		shown = append(shown, fmt.Sprintf("%s → %d bytes `%s`", name, len(b), strings.ReplaceAll(string(b), "\r\n", " ")))
		args = append(args, "--reply", name+"="+hex.EncodeToString(b))
	}
	dir := e.dir("canned")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	p, err := bench.Start(bench.StartOptions{Name: "canned", Path: self, Args: args, Dir: dir, Addr: addr})
	return p, shown, err
}
