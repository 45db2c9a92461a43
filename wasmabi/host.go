package wasmabi

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/ksrunner/ksrunner/wasmabi/internal/abi"
)

// hostFunction is a function of the "ksr" import module. It finds the
// calling Instance in ctx: every call into a guest passes a context carrying
// it (see Instance.ctx).
type hostFunction struct {
	params []api.ValueType
	fn     func(ctx context.Context, i *Instance, mem api.Memory, stack []uint64)
}

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

var hostFunctions = map[string]*hostFunction{
	// log(level, msg_ptr, msg_len)
	abi.ImportLog: {params: []api.ValueType{i32, i32, i32}, fn: func(ctx context.Context, i *Instance, mem api.Memory, s []uint64) {
		msg := readString(mem, s[1], s[2], "log message")
		level := slog.LevelInfo
		switch api.DecodeI32(s[0]) {
		case abi.LogDebug:
			level = slog.LevelDebug
		case abi.LogWarn:
			level = slog.LevelWarn
		case abi.LogError:
			level = slog.LevelError
		}
		i.log.Log(ctx, level, msg)
	}},
	// counter(transform, ns_ptr, ns_len, name_ptr, name_len, delta)
	abi.ImportCounter: {params: []api.ValueType{i32, i32, i32, i32, i32, i64}, fn: func(_ context.Context, i *Instance, mem api.Memory, s []uint64) {
		k := i.metricKey(mem, s)
		i.metrics.Counters[k] += int64(s[5])
	}},
	// distribution(transform, ns_ptr, ns_len, name_ptr, name_len, count, sum, min, max)
	abi.ImportDistribution: {params: []api.ValueType{i32, i32, i32, i32, i32, i64, i64, i64, i64}, fn: func(_ context.Context, i *Instance, mem api.Memory, s []uint64) {
		k := i.metricKey(mem, s)
		d := DistributionValue{Count: int64(s[5]), Sum: int64(s[6]), Min: int64(s[7]), Max: int64(s[8])}
		if d.Count <= 0 {
			return
		}
		if old, ok := i.metrics.Distributions[k]; ok {
			d = old.merge(d)
		}
		i.metrics.Distributions[k] = d
	}},
	// poll(): an interruptible module's loops call it now and then (package
	// interrupt). A done context stops the guest: wazero passes an exit
	// error panicked by a host function through as the call's error.
	abi.ImportPoll: {fn: func(ctx context.Context, _ *Instance, _ api.Memory, _ []uint64) {
		switch ctx.Err() {
		case nil:
		case context.DeadlineExceeded:
			panic(sys.NewExitError(sys.ExitCodeDeadlineExceeded))
		default:
			panic(sys.NewExitError(sys.ExitCodeContextCanceled))
		}
	}},
}

func hostFunctionNames() []string {
	var names []string
	for n := range hostFunctions {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// instantiateHost adds the "ksr" host module to r.
func instantiateHost(ctx context.Context, r wazero.Runtime) error {
	b := r.NewHostModuleBuilder(abi.ImportModule)
	for _, name := range hostFunctionNames() {
		h := hostFunctions[name]
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			i, _ := ctx.Value(instanceKey{}).(*Instance)
			if i == nil {
				panic(fmt.Errorf("host function %s.%s called outside a ksr_* call", abi.ImportModule, name))
			}
			h.fn(ctx, i, m.Memory(), stack)
		}), h.params, nil).Export(name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

type instanceKey struct{}

// readString copies guest memory [ptr, ptr+n). Out-of-bounds arguments
// panic, which wazero turns into an error of the guest call (ErrTrap).
func readString(mem api.Memory, ptr, n uint64, what string) string {
	b, ok := mem.Read(uint32(ptr), uint32(n))
	if !ok {
		panic(fmt.Errorf("%s [%d, +%d) is outside guest memory", what, uint32(ptr), uint32(n)))
	}
	return string(b)
}

func (i *Instance) metricKey(mem api.Memory, s []uint64) MetricKey {
	t := int(api.DecodeI32(s[0]))
	if t < 0 || t >= len(i.stage.Transforms) {
		panic(fmt.Errorf("metric reported for transform index %d; the stage has %d transforms", t, len(i.stage.Transforms)))
	}
	return MetricKey{
		Transform: i.stage.Transforms[t].ID,
		Namespace: readString(mem, s[1], s[2], "metric namespace"),
		Name:      readString(mem, s[3], s[4], "metric name"),
	}
}

// guestOutput receives a guest's stdout and stderr (WASI fds 1 and 2): it
// logs complete lines and keeps the first and last outputKeep bytes written
// since the last reset (each bundle) for error messages: a Go guest prints a
// fatal error's message first, then goroutine dumps, before trapping.
type guestOutput struct {
	mu      sync.Mutex
	log     *slog.Logger
	head    []byte // first outputKeep bytes since reset
	tail    []byte // last outputKeep bytes after head
	dropped bool   // bytes were lost between head and tail
	line    []byte // incomplete line
}

const (
	outputKeep  = 2 << 10
	maxLineSize = 1 << 10
)

func (g *guestOutput) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rest := p
	if n := min(outputKeep-len(g.head), len(rest)); n > 0 {
		g.head, rest = append(g.head, rest[:n]...), rest[n:]
	}
	g.tail = append(g.tail, rest...)
	if len(g.tail) > outputKeep {
		g.tail = append(g.tail[:0], g.tail[len(g.tail)-outputKeep:]...)
		g.dropped = true
	}
	for _, c := range p {
		if c == '\n' || len(g.line) >= maxLineSize {
			g.log.Info("wasm guest output", "line", string(g.line))
			g.line = g.line[:0]
			if c == '\n' {
				continue
			}
		}
		g.line = append(g.line, c)
	}
	return len(p), nil
}

func (g *guestOutput) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.head, g.tail, g.dropped = g.head[:0], g.tail[:0], false
}

// String returns the guest's output since the last reset, abridged.
func (g *guestOutput) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := string(g.head)
	if g.dropped {
		s += "\n[...]\n"
	}
	return s + string(g.tail)
}
