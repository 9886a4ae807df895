//go:build !linux

package ccbench

import (
	"context"
	"fmt"
	"runtime"
)

func (b *bench) run(context.Context) error {
	return fmt.Errorf("ccbench is not implemented on %s: it needs Linux network namespaces, tc and nftables", runtime.GOOS)
}
