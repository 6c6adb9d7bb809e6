package pool

import (
	"context"
	"io"
	"reflect"
)

// What the pool asks of user code to create items, what it refuses from
// it (a nil factory, a nil item), and how it disposes of items when
// Options.Destroy is nil. Creation itself is in create.go.

// Factory creates the items a pool lends.
//
// Create is called with a context that carries the values of the ctx given
// to Lease but not its cancellation: a creation that the caller abandons
// finishes in the background and its item goes idle, so an impatient caller
// never costs a second dial. The context is canceled by Close and bounded
// by Options.CreateTimeout. New's creations are different: they run under
// New's own ctx (and CreateTimeout), and the first failure cancels the
// others. A Create that ignores its context counts against MaxSize until
// it returns, so bound your dials.
//
// A panic in Create reaches the Lease that waits for it (the pool stays
// consistent); in a creation whose caller gave up it counts as a failed
// creation. A Create that calls runtime.Goexit (t.FailNow in a test) ends the
// caller's goroutine when it runs there (for a ctx that cannot end), as Goexit
// does; when it runs on a goroutine of its own (for a ctx that can), the
// waiting Lease panics with a message saying so. Either way the item's
// place under MaxSize is free again.
//
// Create may be called from several goroutines at once.
type Factory[T any] interface {
	Create(ctx context.Context) (T, error)
}

// FactoryFunc adapts a function to the Factory interface.
type FactoryFunc[T any] func(ctx context.Context) (T, error)

// Create calls f(ctx).
func (f FactoryFunc[T]) Create(ctx context.Context) (T, error) { return f(ctx) }

// closeItem is the default disposal: Close when the item is an io.Closer,
// nothing otherwise. The check is made per item, so an interface-typed T
// whose dynamic values differ is handled too.
func closeItem[T any](item T) error {
	if c, ok := any(item).(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// isNil reports whether v is nil or holds a nil pointer, func, map, slice,
// channel or interface: a typed nil, which an interface-valued option or
// the factory must not be taken for a value.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return canBeNil(rv.Type()) && rv.IsNil()
}

// canBeNil reports whether values of t can be nil.
func canBeNil(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return true
	}
	return false
}
