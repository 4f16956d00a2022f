package natsutil

import "strings"

// SubjectsOverlap reports whether some subject matches both a and b: subjects or
// subscription patterns, compared token by token, where "*" matches any one token
// and ">" (the last token) one or more. "a.*" and "a.b" overlap, "a.>" and "a" do
// not, "a.*.c" and "a.b.>" do.
func SubjectsOverlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(at) && i == len(bt):
			return true
		case i == len(at) || i == len(bt):
			return false
		case at[i] == ">" || bt[i] == ">":
			return true
		case at[i] != "*" && bt[i] != "*" && at[i] != bt[i]:
			return false
		}
	}
}
