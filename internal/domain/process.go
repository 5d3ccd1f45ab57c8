package domain

import "regexp"

// processTag is what a process's tag may be: a letter, then up to 63
// letters, digits, '.', '_' or '-'. It starts with a letter so that a path
// segment of digits is always a pid.
var processTag = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,63}$`)

// ValidProcessTag reports whether tag may name a process: every tag a
// process started through Tether's API has, whichever face started it.
func ValidProcessTag(tag string) bool { return processTag.MatchString(tag) }
