// Package headertest reads back the rate-limit header fields package
// header writes, for tests of the front ends that send them.
package headertest

import (
	"fmt"
	"strconv"
	"strings"
)

// Item is one member of a RateLimit or RateLimit-Policy list.
type Item struct {
	Name   string
	Params map[string]string
}

// ParseList parses the Structured Field lists header writes: sf-string
// names with ;key=value parameters, comma-separated. It is no general
// Structured Field parser: it reads what header writes, and fails on
// anything else.
func ParseList(v string) ([]Item, error) {
	var items []Item
	for _, member := range strings.Split(v, ",") {
		parts := strings.Split(strings.TrimSpace(member), ";")
		name, err := strconv.Unquote(parts[0])
		if err != nil {
			return nil, fmt.Errorf("item name %q of %q: %w", parts[0], v, err)
		}
		it := Item{Name: name, Params: map[string]string{}}
		for _, p := range parts[1:] {
			k, val, ok := strings.Cut(p, "=")
			if !ok {
				return nil, fmt.Errorf("parameter %q of %q has no value", p, v)
			}
			it.Params[k] = val
		}
		items = append(items, it)
	}
	return items, nil
}
