package pool

import (
	"context"
	"io"
	"reflect"
)

// Factory creates the items a pool lends. Create may be called from several
// goroutines at once, with a context that carries the values of Lease's ctx
// but not its cancellation: a creation the caller abandons finishes in the
// background and its item goes idle. The context is canceled by Close and
// bounded by Options.CreateTimeout; New's creations instead run under New's
// ctx (and CreateTimeout), the first failure canceling the others. A Create
// that ignores its context counts against MaxSize until it returns.
//
// A panic in Create reaches the Lease waiting for it or, if its caller gave
// up, counts as a failed creation; the pool stays consistent. A Create that
// calls runtime.Goexit ends the caller's goroutine when it runs there (for a
// ctx that cannot end); on a goroutine of its own (for a ctx that can), the
// waiting Lease panics saying so. Either way the place under MaxSize is freed.
type Factory[T any] interface {
	Create(ctx context.Context) (T, error)
}

// FactoryFunc adapts a function to the Factory interface.
type FactoryFunc[T any] func(ctx context.Context) (T, error)

// Create calls f(ctx).
func (f FactoryFunc[T]) Create(ctx context.Context) (T, error) { return f(ctx) }

// closeItem is the default Destroy. It checks each item, so an
// interface-typed T whose dynamic values differ is handled too.
func closeItem[T any](item T) error {
	if c, ok := any(item).(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// isNil: v is nil or a typed nil, which must not be taken for a value.
func isNil(v any) bool {
	rv := reflect.ValueOf(v)
	return !rv.IsValid() || canBeNil(rv.Type()) && rv.IsNil()
}

func canBeNil(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return true
	}
	return false
}
