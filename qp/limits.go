package qp

// Limits of the software device.
const (
	MaxWR         = 1 << 15
	MaxSGE        = 32
	MaxInlineData = 256
	MaxCQE        = 1 << 20
	MaxRDAtomic   = 128
)
