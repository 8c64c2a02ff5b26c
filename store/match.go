package store

// Match reports whether str matches the glob pattern with Redis's exact
// semantics (stringmatchlen in Redis's util.c): '*', '?', '[...]' with ranges
// and '^' negation, and '\' escapes. nocase folds ASCII case.
func Match(pattern, str []byte, nocase bool) bool {
	var skipLonger bool
	return matchLen(pattern, str, nocase, &skipLonger, 0)
}

func lower(b byte, nocase bool) byte {
	if nocase && b >= 'A' && b <= 'Z' {
		return b + ('a' - 'A')
	}
	return b
}

// matchLen is Redis's stringmatchlen_impl, with its cut for patterns of
// many stars (CVE-2022-36021): once the rest of the pattern after a '*'
// matched nowhere in the rest of the string, no earlier '*' can help by
// matching more, so skipLonger ends the search. Without it '*a*a*a...b'
// takes exponential time.
func matchLen(p, s []byte, nocase bool, skipLonger *bool, nesting int) bool {
	// Like Redis, stop runaway recursion on pathological patterns.
	if nesting > 1000 {
		return false
	}
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for len(s) > 0 {
				if matchLen(p[1:], s, nocase, skipLonger, nesting+1) {
					return true
				}
				if *skipLonger {
					return false
				}
				s = s[1:]
			}
			*skipLonger = true
			return false
		case '?':
			s = s[1:]
		case '[':
			p = p[1:]
			not := len(p) > 0 && p[0] == '^'
			if not {
				p = p[1:]
			}
			match := false
			for {
				if len(p) == 0 {
					break
				}
				if p[0] == '\\' && len(p) >= 2 {
					p = p[1:]
					if p[0] == s[0] {
						match = true
					}
				} else if p[0] == ']' {
					break
				} else if len(p) >= 3 && p[1] == '-' {
					start, end := lower(p[0], nocase), lower(p[2], nocase)
					if start > end {
						start, end = end, start
					}
					c := lower(s[0], nocase)
					p = p[2:]
					if c >= start && c <= end {
						match = true
					}
				} else if lower(p[0], nocase) == lower(s[0], nocase) {
					match = true
				}
				p = p[1:]
			}
			if len(p) == 0 {
				// Unterminated class: Redis treats the end as ']'.
				p = []byte{']'}
			}
			if not {
				match = !match
			}
			if !match {
				return false
			}
			s = s[1:]
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			fallthrough
		default:
			if lower(p[0], nocase) != lower(s[0], nocase) {
				return false
			}
			s = s[1:]
		}
		p = p[1:]
		if len(s) == 0 {
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			break
		}
	}
	return len(p) == 0 && len(s) == 0
}
