//go:build !linux

package bench

import "errors"

// Pipeload needs epoll: on other systems, use redis-benchmark.
func Pipeload(s BenchSpec) (BenchResult, error) {
	return BenchResult{}, errors.New("pipeload: Linux only")
}
