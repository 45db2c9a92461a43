package interrupt

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

func section(id byte, items ...[]byte) []byte {
	p := binary.AppendUvarint(nil, uint64(len(items)))
	for _, it := range items {
		p = append(p, it...)
	}
	return append(append([]byte{id}, binary.AppendUvarint(nil, uint64(len(p)))...), p...)
}

func body(code ...byte) []byte {
	b := append([]byte{1, 1, 0x7f}, code...) // one i32 local
	b = append(b, opEnd)
	return append(binary.AppendUvarint(nil, uint64(len(b))), b...)
}

func str(s string) []byte { return append(binary.AppendUvarint(nil, uint64(len(s))), s...) }

// testModule exercises every place a function index appears: it imports
// env.base (function 0), its start function (2) sets a global, its "run"
// (3) loops iterations times calling function 1 through a table (an active
// element segment) and adds env.base(); a global is initialised with
// ref.func 1.
func testModule(iterations int32) []byte {
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, section(secType,
		[]byte{0x60, 0, 1, 0x7f}, // 0: () -> i32
		[]byte{0x60, 0, 0},       // 1: () -> ()
	)...)
	m = append(m, section(secImport, append(append(str("env"), str("base")...), 0, 0))...)
	m = append(m, section(secFunction, []byte{0}, []byte{1}, []byte{0})...) // 1, 2, 3
	m = append(m, section(secTable, []byte{0x70, 0, 1})...)                 // funcref, min 1
	m = append(m, section(secGlobal,
		[]byte{0x7f, 1, opI32Const, 0, opEnd}, // 0: mutable i32, set by start
		[]byte{0x70, 0, opRefFunc, 1, opEnd},  // 1: funcref = function 1
	)...)
	m = append(m, section(secExport,
		append(str("run"), 0, 3),
		append(str("started"), 3, 0),
		append(str("ref"), 3, 1),
	)...)
	m = append(m, secStart, 1, 2)                                                // start: function 2 (not a vector)
	m = append(m, section(secElement, []byte{0, opI32Const, 0, opEnd, 1, 1})...) // table[0] = function 1
	iter := appendSLEB(nil, int64(iterations))
	run := []byte{
		opLoop, 0x40,
		0x20, 0, // local.get 0
		opI32Const, 0, 0x11, 0, 0, // call_indirect type 0 table 0 (function 1: returns 1)
		0x6a,    // i32.add
		0x22, 0, // local.tee 0
		opI32Const}
	run = append(run, iter...)
	run = append(run, 0x48, 0x0d, 0, opEnd, // i32.lt_s; br_if 0; end
		0x20, 0, opCall, 0, 0x6a) // local.get 0; call env.base; i32.add
	m = append(m, section(secCode,
		body(opI32Const, 1),                 // 1: returns 1
		body(opI32Const, 7, opGlobalSet, 0), // 2: started = 7
		body(run...),                        // 3: run
	)...)
	// name section: function names (subsection 1) of functions 1 and 3.
	names := []byte{2, 1}
	names = append(append(names, str("one")...), 3)
	names = append(names, str("run")...)
	custom := append(str("name"), 1)
	custom = append(append(custom, binary.AppendUvarint(nil, uint64(len(names)))...), names...)
	m = append(m, secCustom)
	m = append(append(m, binary.AppendUvarint(nil, uint64(len(custom)))...), custom...)
	return m
}

func TestInstrument(t *testing.T) {
	ctx := context.Background()
	const iterations = 3*Budget + 10
	wasm, err := Instrument(testModule(iterations), "ksr", "poll")
	if err != nil {
		t.Fatal(err)
	}
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	polls := 0
	if _, err := r.NewHostModuleBuilder("env").NewFunctionBuilder().
		WithFunc(func() int32 { return 1000 }).Export("base").Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.NewHostModuleBuilder("ksr").NewFunctionBuilder().
		WithFunc(func() { polls++ }).Export("poll").Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	mod, err := r.Instantiate(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	if got := mod.ExportedGlobal("started").Get(); got != 7 {
		t.Errorf("global set by the start function: %d, want 7", got)
	}
	res, err := mod.ExportedFunction("run").Call(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := api.DecodeI32(res[0]); got != iterations+1000 {
		t.Errorf("run() = %d, want %d", got, iterations+1000)
	}
	if polls != iterations/Budget {
		t.Errorf("%d polls in %d loop iterations, want %d", polls, iterations, iterations/Budget)
	}
	names := mod.ExportedFunctionDefinitions()["run"].DebugName()
	if names != ".run" {
		t.Errorf("run's name: %q", names)
	}
}

func TestInstrumentErrors(t *testing.T) {
	for name, wasm := range map[string][]byte{
		"not wasm":  []byte("\x00elf\x01\x00\x00\x00"),
		"truncated": testModule(1)[:40],
		"try":       append([]byte("\x00asm\x01\x00\x00\x00"), section(secCode, body(0x06, 0x40, opEnd))...),
	} {
		if _, err := Instrument(wasm, "ksr", "poll"); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
