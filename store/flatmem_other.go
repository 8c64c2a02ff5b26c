//go:build !linux

package store

func mapAnon(int) []byte { return nil }

func unmapAnon([]byte) {}
