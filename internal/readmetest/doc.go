// Package readmetest holds the test that builds and runs every Go program
// of the repository's README.md (and fails on a Go block that is not a
// complete program), so that what the front door shows runs as written.
// It has no code of its own; cmd/roce's tests parse the README's roce
// command lines.
package readmetest
