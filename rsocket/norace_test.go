//go:build !race

package rsocket

// raceEnabled says the race detector is on: the long transfers shrink.
const raceEnabled = false
