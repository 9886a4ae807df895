// Package readmetest holds the test that builds and runs the complete Go
// programs of the repository's README.md, so that what the front door
// shows runs as written. It has no code of its own.
package readmetest
