package sample

// Func is an exported function.
func Func() {}

func unexported() {}

// T is a type with methods on the value and the pointer.
type T struct{}

// Value is on the value.
func (T) Value() {}

// Ptr is on the pointer.
func (*T) Ptr() {}

type hidden struct{}

// Reached is reachable through an interface.
func (h *hidden) Reached() {}

// G is generic.
type G[E any] struct{}

// Get is on a generic type.
func (g *G[E]) Get() {}
