module github.com/goroce/goroce

go 1.26.0

require (
	github.com/gopacket/gopacket v1.7.7
	github.com/mdlayher/packet v1.2.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/mdlayher/socket v0.7.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
)
