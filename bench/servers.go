package bench

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Module is the cellserver module path; FindRepo looks for its go.mod.
const Module = "github.com/cellserver/cellserver"

// AptHint is printed when the Redis tools are missing.
const AptHint = "sudo apt-get update && sudo apt-get install -y redis-server   # provides redis-server and redis-benchmark (redis-tools)"

// FindRepo walks up from dir to the directory holding cellserver's go.mod.
func FindRepo(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for i := 0; i < 64; i++ {
		if f, err := os.Open(filepath.Join(d, "go.mod")); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if strings.TrimSpace(sc.Text()) == "module "+Module {
					f.Close()
					return d, nil
				}
			}
			f.Close()
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	return "", fmt.Errorf("bench: no go.mod for %s above %s (run from inside the repository)", Module, dir)
}

// LookTools resolves redis-server and redis-benchmark (bare names are looked
// up in PATH) and returns a helpful error naming the apt-get command if either
// is missing.
func LookTools(redisServer, redisBenchmark string) (string, string, error) {
	var missing []string
	rs, err := exec.LookPath(redisServer)
	if err != nil {
		missing = append(missing, redisServer)
	}
	rb, err := exec.LookPath(redisBenchmark)
	if err != nil {
		missing = append(missing, redisBenchmark)
	}
	if len(missing) > 0 {
		return "", "", fmt.Errorf("missing %s; install with:\n    %s", strings.Join(missing, " and "), AptHint)
	}
	return rs, rb, nil
}

// BuildCellserver builds ./cmd/cellserver of repo into dir and returns the
// binary's path.
func BuildCellserver(repo, dir string) (string, error) {
	out := filepath.Join(dir, "cellserver")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/cellserver")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/cellserver: %v\n%s", err, b)
	}
	return out, nil
}

// BuildCellserverRev builds ./cmd/cellserver as of git revision rev (a clean
// snapshot exported with git archive, so uncommitted edits do not count) and
// returns the binary's path and the full commit hash.
func BuildCellserverRev(repo, rev, dir string) (string, string, error) {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "--verify", rev+"^{commit}").Output()
	if err != nil {
		return "", "", fmt.Errorf("git rev-parse %s: %v", rev, err)
	}
	commit := strings.TrimSpace(string(out))
	src := filepath.Join(dir, "src-"+commit[:12])
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", "", err
	}
	cmd := exec.Command("git", "-C", repo, "archive", "--format=tar", commit)
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return "", "", err
	}
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	xerr := untar(pipe, src)
	werr := cmd.Wait()
	if xerr != nil || werr != nil {
		return "", "", fmt.Errorf("git archive %s: %v %v", rev, xerr, werr)
	}
	bin, err := BuildCellserver(src, dir)
	return bin, commit, err
}

// untar extracts regular files and directories of a tar stream under dst.
func untar(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	for i := 0; i < 1_000_000; i++ {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("unsafe path %q in archive", h.Name)
		}
		p := filepath.Join(dst, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
	return errors.New("archive has too many entries")
}

// CellserverOptions configures StartCellserver.
type CellserverOptions struct {
	Binary  string
	Dir     string   // a fresh directory: the working directory, so a default data dir lands there
	Args    []string // extra flags passed through (--server-args)
	GCTrace bool     // run with GODEBUG=gctrace=1 and collect the pauses
	Name    string   // log name; default "cellserver"
}

// StartCellserver starts cellserver on a free loopback port with its default
// flags plus o.Args.
func StartCellserver(o CellserverOptions) (*Proc, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	var env []string
	if o.GCTrace {
		g := "gctrace=1"
		if cur := os.Getenv("GODEBUG"); cur != "" {
			g = cur + ",gctrace=1"
		}
		env = append(env, "GODEBUG="+g)
	}
	name := o.Name
	if name == "" {
		name = "cellserver"
	}
	return Start(StartOptions{
		Name: name, Path: o.Binary, Dir: o.Dir, Addr: addr, Env: env, GCTrace: o.GCTrace,
		Args: append([]string{"--addr", addr}, o.Args...),
	})
}

// RedisOptions configures StartRedis.
type RedisOptions struct {
	Binary string
	Dir    string
	Name   string
	Module string // --loadmodule path, optional
}

// StartRedis starts a redis-server with no persistence on a free loopback
// port, in the foreground, as a child of the harness.
func StartRedis(o RedisOptions) (*Proc, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "yes", "--dir", o.Dir}
	if o.Module != "" {
		abs, err := filepath.Abs(o.Module)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("redis-cell module: %w", err)
		}
		args = append(args, "--loadmodule", abs)
	}
	return Start(StartOptions{Name: o.Name, Path: o.Binary, Dir: o.Dir, Addr: "127.0.0.1:" + strconv.Itoa(port), Args: args})
}

// ScriptLoad loads src into the server at addr and returns its SHA1.
func ScriptLoad(addr, src string) (string, error) {
	c, err := Dial(addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	v, err := c.Do("SCRIPT", "LOAD", src)
	if err != nil {
		return "", err
	}
	if v.Kind != '$' || len(v.Str) != 40 {
		return "", fmt.Errorf("SCRIPT LOAD: %s", v)
	}
	return v.Str, nil
}

// One sends a single command on a fresh connection.
func One(addr string, args ...string) (Value, error) {
	c, err := Dial(addr, 5*time.Second)
	if err != nil {
		return Value{}, err
	}
	defer c.Close()
	return c.Do(args...)
}

// InfoField returns one numeric field of INFO <section>.
func InfoField(addr, section, field string) (int64, error) {
	v, err := One(addr, "INFO", section)
	if err != nil {
		return 0, err
	}
	if v.Kind != '$' {
		return 0, fmt.Errorf("INFO %s: %s", section, v)
	}
	for _, l := range strings.Split(v.Str, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return strconv.ParseInt(rest, 10, 64)
		}
	}
	return 0, errors.New("INFO has no " + field)
}

// SplitArgs splits a --server-args string on spaces, honouring single and
// double quotes (no escapes).
func SplitArgs(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inTok := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inTok = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inTok {
				out = append(out, cur.String())
				cur.Reset()
				inTok = false
			}
		default:
			cur.WriteRune(r)
			inTok = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inTok {
		out = append(out, cur.String())
	}
	return out, nil
}
