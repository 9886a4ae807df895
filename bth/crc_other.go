//go:build !amd64

package bth

import "hash/crc32"

// crcUpdate is crc32.Update with the IEEE table.
func crcUpdate(crc uint32, p []byte) uint32 { return crc32.Update(crc, crc32.IEEETable, p) }

// crcJoined returns the CRC-32 of head followed by p.
func crcJoined(head, p []byte) uint32 { return crcUpdate(crcShort(0, head), p) }
