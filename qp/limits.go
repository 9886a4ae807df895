package qp

// Limits of the software device.
const (
	MaxWR         = 1 << 15
	MaxSGE        = 32
	MaxInlineData = 256
	MaxCQE        = 1 << 20
	MaxRDAtomic   = 128
)

// DefaultMaxQPs is how many queue pairs a device has at once unless
// Config.MaxQPs says otherwise: rxe's long-standing RXE_MAX_QP. An idle
// RC QP takes about 1 KiB.
const DefaultMaxQPs = 1 << 16
