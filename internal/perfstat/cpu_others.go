//go:build !unix

package perfstat

// ProcessCPU returns zero: this system's process times are not read.
func ProcessCPU() CPU { return CPU{} }
