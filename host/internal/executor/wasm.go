package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/translate"
	"github.com/ksrunner/ksrunner/wasmabi"
)

// WASM stages (option stage_wasm). At submission StartJob compiles every
// module a stage needs (once per job, compiled code cached on disk) and
// instantiates it once per stage to check it: the ABI version, that the
// module registers the stage's DoFns and that their Setup succeeds. Running,
// every task gets its own Instance per stage (instances are single-threaded),
// created on the task's first bundle and closed when the task ends. After
// any error the task's instance is discarded; the error, which names the
// module, stage, transform and the guest's message, fails the job.

const (
	urnParDo            = "beam:transform:pardo:v1"
	urnArtifactFile     = "beam:artifact:type:file:v1"
	urnArtifactStagedAs = "beam:artifact:role:staging_to:v1"

	// annotationExecutor, set on every transform of a stage in the pipeline
	// that GetPipeline returns, says which executor runs it.
	annotationExecutor = "ksrunner:executor"
	annotationStage    = "ksrunner:stage"
)

// WASM is a job's compiled modules and the executors of its WASM stages.
type WASM struct {
	modules map[string]*wasmabi.Module // by module location
	execs   map[string]*wasmExecutor   // by stage id
}

// Close closes the modules; w may be nil.
func (w *WASM) Close() {
	if w == nil {
		return
	}
	for _, m := range w.modules {
		_ = m.Close(context.Background())
	}
}

// wasmRef is a parsed module reference: MODULE[#DOFN].
type wasmRef struct {
	location string // file path, file: URL or artifact:NAME
	dofn     string // empty: derived from the transform's name
}

func parseWASMRef(ref string) wasmRef {
	loc, dofn, _ := strings.Cut(ref, "#")
	return wasmRef{location: strings.TrimSpace(loc), dofn: strings.TrimSpace(dofn)}
}

// WASMConfig is how PrepareWASM compiles and runs modules.
type WASMConfig struct {
	// Patterns is option stage_wasm: transform name pattern → module
	// reference.
	Patterns map[string]string
	// CacheDir holds compiled modules (wazero keys entries by the module's
	// hash and its own version, so processes may share it).
	CacheDir      string
	Interruptible bool
	// MemoryLimitPages caps every instance's linear memory (64 KiB pages;
	// 0: wasmabi's default).
	MemoryLimitPages uint32
	BundleDeadline   time.Duration
	// OnStuck is called when a bundle of a non-interruptible guest is still
	// running at BundleDeadline: what to do then (the guest cannot be stopped
	// in-process) is the caller's policy.
	OnStuck func(wasmabi.StuckBundle)
	Logger  *slog.Logger
	// Modules, if set, hold modules by their file path or URL reference,
	// read by the process that received the job (a worker or a restarted
	// job server has them from the pipeline topic, not from its own disk).
	Modules map[string][]byte
}

// PrepareWASM compiles and checks the modules of the plan's WASM stages.
// Every stage_wasm mapping must select at least one transform that runs in
// a WASM stage.
func PrepareWASM(ctx context.Context, plan *translate.Plan, cfg WASMConfig) (_ *WASM, err error) {
	patterns := cfg.Patterns
	var stages []*translate.Stage
	for _, st := range plan.SubTopologies {
		for _, s := range st.Stages {
			if s.Executor == translate.ExecutorWASM {
				stages = append(stages, s)
			}
		}
	}
	if len(patterns) == 0 && len(stages) == 0 {
		return nil, nil
	}
	comps := plan.Pipeline.GetComponents()
	if err := checkWASMPatterns(patterns, stages, comps); err != nil {
		return nil, err
	}

	w := &WASM{modules: map[string]*wasmabi.Module{}, execs: map[string]*wasmExecutor{}}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	for _, s := range stages {
		if err := w.prepareStage(ctx, plan, s, cfg); err != nil {
			return nil, fmt.Errorf("option stage_wasm: stage %s (transforms %s): %w", s.ID, transformNames(comps, s.Transforms), err)
		}
	}
	return w, nil
}

// checkWASMPatterns fails for a pattern that selects no transform of a
// WASM stage (by its own unique name or an enclosing composite's).
func checkWASMPatterns(patterns map[string]string, stages []*translate.Stage, comps *pipepb.Components) error {
	parent := map[string]string{}
	for id, t := range comps.GetTransforms() {
		for _, sub := range t.GetSubtransforms() {
			parent[sub] = id
		}
	}
	used := map[string]bool{}
	for _, s := range stages {
		for _, id := range s.Transforms {
			for cur := id; cur != ""; cur = parent[cur] {
				name := comps.GetTransforms()[cur].GetUniqueName()
				for pat := range patterns {
					if ok, _ := path.Match(pat, name); ok || pat == name {
						used[pat] = true
					}
				}
			}
		}
	}
	for _, pat := range slices.Sorted(maps.Keys(patterns)) {
		if used[pat] {
			continue
		}
		var pardos []string
		for _, t := range comps.GetTransforms() {
			if t.GetSpec().GetUrn() == urnParDo {
				pardos = append(pardos, t.GetUniqueName())
			}
		}
		slices.Sort(pardos)
		if len(pardos) > 20 {
			pardos = append(pardos[:20], "...")
		}
		return fmt.Errorf("option stage_wasm: %q matches no transform that runs as a WASM DoFn (patterns are path.Match globs over unique names, in which * does not match /; the pipeline's ParDos: %s)",
			pat+"="+patterns[pat], strings.Join(pardos, ", "))
	}
	return nil
}

func transformNames(comps *pipepb.Components, ids []string) string {
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = comps.GetTransforms()[id].GetUniqueName()
		if names[i] == "" {
			names[i] = id
		}
	}
	return "[" + strings.Join(names, ", ") + "]"
}

func (w *WASM) prepareStage(ctx context.Context, plan *translate.Plan, s *translate.Stage, cfg WASMConfig) error {
	comps := plan.Pipeline.GetComponents()
	spec := wasmabi.StageSpec{
		ID:         s.ID,
		Input:      s.Input,
		InputCoder: plan.WireCoders[s.Input],
		Coders:     comps.GetCoders(),
		Outputs:    s.Outputs,
	}
	var location string
	for _, id := range s.Transforms {
		ref := parseWASMRef(s.WASMModules[id])
		if location == "" {
			location = ref.location
		} else if ref.location != location {
			return fmt.Errorf("transforms mapped to different modules (%s, %s) fused in one stage", location, ref.location)
		}
		t := comps.GetTransforms()[id]
		tr, err := wasmTransform(id, t, ref)
		if err != nil {
			return err
		}
		spec.Transforms = append(spec.Transforms, tr)
	}
	if location == "" {
		return errors.New("no module reference")
	}
	m := w.modules[location]
	if m == nil {
		wasm, name, err := cfg.Modules[location], "", error(nil)
		if wasm != nil {
			name = moduleName(location)
		} else if wasm, name, err = loadWASM(location, comps); err != nil {
			return err
		}
		mcfg := wasmabi.Config{
			Name:             name,
			CacheDir:         cfg.CacheDir,
			Interruptible:    cfg.Interruptible,
			MemoryLimitPages: cfg.MemoryLimitPages,
			BundleDeadline:   cfg.BundleDeadline,
			OnStuck:          cfg.OnStuck,
			Logger:           cfg.Logger,
		}
		if m, err = wasmabi.Compile(ctx, wasm, mcfg); err != nil {
			return err
		}
		w.modules[location] = m
	}
	// Check the module with this stage now rather than in the first task:
	// the ABI version, the DoFns and their Setup.
	inst, err := m.Instantiate(ctx, spec)
	if err != nil {
		return err
	}
	if err := inst.Close(ctx); err != nil {
		return err
	}
	w.execs[s.ID] = &wasmExecutor{stage: s, module: m, location: location, spec: spec}
	return nil
}

// wasmTransform describes a ParDo of a WASM stage for the guest.
func wasmTransform(id string, t *pipepb.PTransform, ref wasmRef) (wasmabi.Transform, error) {
	name := t.GetUniqueName()
	if urn := t.GetSpec().GetUrn(); urn != urnParDo {
		return wasmabi.Transform{}, fmt.Errorf("transform %q: only ParDos run as WASM DoFns, not %s", name, urn)
	}
	var pd pipepb.ParDoPayload
	if err := proto.Unmarshal(t.GetSpec().GetPayload(), &pd); err != nil {
		return wasmabi.Transform{}, fmt.Errorf("transform %q: ParDo payload: %w", name, err)
	}
	switch {
	case len(pd.GetSideInputs()) > 0:
		return wasmabi.Transform{}, fmt.Errorf("transform %q: side inputs are not supported in WASM stages", name)
	case len(pd.GetStateSpecs()) > 0 || len(pd.GetTimerFamilySpecs()) > 0:
		return wasmabi.Transform{}, fmt.Errorf("transform %q: state and timers are not supported in WASM stages", name)
	case pd.GetRestrictionCoderId() != "":
		return wasmabi.Transform{}, fmt.Errorf("transform %q: splittable DoFns are not supported in WASM stages", name)
	}
	if len(t.GetInputs()) != 1 {
		return wasmabi.Transform{}, fmt.Errorf("transform %q: %d inputs, want 1", name, len(t.GetInputs()))
	}
	var input string
	for _, pc := range t.GetInputs() {
		input = pc
	}
	dofn := ref.dofn
	if dofn == "" {
		dofn = name[strings.LastIndex(name, "/")+1:]
	}
	return wasmabi.Transform{ID: id, DoFn: dofn, Input: input, Outputs: t.GetOutputs()}, nil
}

// ModuleFiles reads the modules that patterns (option stage_wasm) name by a
// file path or URL, by that reference, for the processes that get the job
// from the pipeline topic (modules staged as artifacts travel with the
// artifacts).
func ModuleFiles(patterns map[string]string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, ref := range patterns {
		loc := parseWASMRef(ref).location
		if strings.HasPrefix(loc, "artifact:") || out[loc] != nil {
			continue
		}
		b, _, err := loadWASM(loc, nil)
		if err != nil {
			return nil, fmt.Errorf("option stage_wasm: %w", err)
		}
		out[loc] = b
	}
	return out, nil
}

// moduleName is the name a module at location (a path or file: URL) goes by.
func moduleName(location string) string {
	if u, err := url.Parse(location); err == nil && u.Scheme == "file" {
		location = u.Path
	}
	return filepath.Base(location)
}

// loadWASM reads a module: a file path, a file: URL, or artifact:NAME, a
// file staged with the job under NAME (any environment's dependency whose
// staging role names it).
func loadWASM(location string, comps *pipepb.Components) (wasm []byte, name string, err error) {
	file := location
	switch {
	case strings.HasPrefix(location, "artifact:"):
		staged := strings.TrimPrefix(location, "artifact:")
		var names []string
		file = ""
		for _, env := range comps.GetEnvironments() {
			for _, dep := range env.GetDependencies() {
				if dep.GetRoleUrn() != urnArtifactStagedAs || dep.GetTypeUrn() != urnArtifactFile {
					continue
				}
				var role pipepb.ArtifactStagingToRolePayload
				var fp pipepb.ArtifactFilePayload
				if proto.Unmarshal(dep.GetRolePayload(), &role) != nil || proto.Unmarshal(dep.GetTypePayload(), &fp) != nil {
					continue
				}
				names = append(names, role.GetStagedName())
				if role.GetStagedName() == staged {
					file = fp.GetPath()
				}
			}
		}
		if file == "" {
			slices.Sort(names)
			return nil, "", fmt.Errorf("module %s: no artifact staged as %q (staged: %v)", location, staged, names)
		}
		name = staged
	case strings.HasPrefix(location, "file:"):
		u, err := url.Parse(location)
		if err != nil {
			return nil, "", fmt.Errorf("module %s: %w", location, err)
		}
		if u.Host != "" && u.Host != "localhost" {
			return nil, "", fmt.Errorf("module %s: only local file URLs are supported", location)
		}
		file = u.Path
		if file == "" {
			file = u.Opaque
		}
	}
	if name == "" {
		name = filepath.Base(file)
	}
	wasm, err = os.ReadFile(file)
	if err != nil {
		return nil, "", fmt.Errorf("module %s: %w", location, err)
	}
	return wasm, name, nil
}

// wasmExecutor runs a WASM stage. It is shared by the tasks; each task runs
// its own instance (newTaskExecutor).
type wasmExecutor struct {
	stage    *translate.Stage
	module   *wasmabi.Module
	location string
	spec     wasmabi.StageSpec
}

func (e *wasmExecutor) StartBundle(context.Context, func(string, []byte) error, BundleIO) (Bundle, error) {
	return nil, fmt.Errorf("internal error: WASM stage %s used without a task executor", e.stage.ID)
}

func (e *wasmExecutor) newTaskExecutor() taskExecutor { return &wasmTaskExecutor{e: e} }

// wasmTaskExecutor is a task's executor of a WASM stage: one instance,
// created on the first bundle, discarded after any error, closed with the
// task.
type wasmTaskExecutor struct {
	e    *wasmExecutor
	mu   sync.Mutex // one call at a time; close waits for a running one
	inst *wasmabi.Instance
}

func (t *wasmTaskExecutor) StartBundle(ctx context.Context, emit func(string, []byte) error, io BundleIO) (Bundle, error) {
	if io.State != nil || io.Timers != nil {
		return nil, fmt.Errorf("WASM stages have no side inputs, state or timers")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inst == nil {
		inst, err := t.e.module.Instantiate(ctx, t.e.spec)
		if err != nil {
			return nil, err
		}
		t.inst = inst
	}
	b, err := t.inst.StartBundle(ctx, emit)
	if err != nil {
		t.discard()
		return nil, err
	}
	return &wasmBundle{t: t, b: b}, nil
}

// discard drops the instance after an error (under mu).
func (t *wasmTaskExecutor) discard() {
	if t.inst != nil {
		_ = t.inst.Close(context.Background())
		t.inst = nil
	}
}

func (t *wasmTaskExecutor) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.discard()
}

type wasmBundle struct {
	t *wasmTaskExecutor
	b *wasmabi.Bundle
}

func (b *wasmBundle) ProcessTimers(transformID, familyID string, _ []byte) error {
	return fmt.Errorf("WASM stage: transform %s has no timers (family %s)", transformID, familyID)
}

func (b *wasmBundle) Process(data []byte) error {
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	if err := b.b.Process(data); err != nil {
		b.t.discard()
		return err
	}
	return nil
}

func (b *wasmBundle) Finish() (Result, error) {
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	res, err := b.b.Finish()
	if err != nil {
		b.t.discard()
		return Result{}, err
	}
	return Result{Metrics: wasmMonitoringInfos(res)}, nil
}

// wasmMonitoringInfos converts a bundle's user metrics to the
// MonitoringInfos an SDK harness reports for them.
func wasmMonitoringInfos(r *wasmabi.Result) []*pipepb.MonitoringInfo {
	var out []*pipepb.MonitoringInfo
	labels := func(k wasmabi.MetricKey) map[string]string {
		return map[string]string{"PTRANSFORM": k.Transform, "NAMESPACE": k.Namespace, "NAME": k.Name}
	}
	for k, v := range r.Counters {
		var b bytes.Buffer
		coder.EncodeVarInt(v, &b)
		out = append(out, &pipepb.MonitoringInfo{
			Urn: "beam:metric:user:sum_int64:v1", Type: "beam:metrics:sum_int64:v1", Payload: b.Bytes(), Labels: labels(k),
		})
	}
	for k, d := range r.Distributions {
		var b bytes.Buffer
		for _, v := range []int64{d.Count, d.Sum, d.Min, d.Max} {
			coder.EncodeVarInt(v, &b)
		}
		out = append(out, &pipepb.MonitoringInfo{
			Urn: "beam:metric:user:distribution_int64:v1", Type: "beam:metrics:distribution_int64:v1", Payload: b.Bytes(), Labels: labels(k),
		})
	}
	return out
}

// DescribeStages returns a job message per stage saying which executor runs
// it, and p annotated likewise (annotationExecutor and annotationStage on
// each transform of a stage), for GetPipeline.
func DescribeStages(p *pipepb.Pipeline, plan *translate.Plan, w *WASM) ([]string, *pipepb.Pipeline) {
	p = proto.Clone(p).(*pipepb.Pipeline)
	comps := plan.Pipeline.GetComponents()
	var msgs []string
	for _, st := range plan.SubTopologies {
		for _, s := range st.Stages {
			var exec, msg string
			switch s.Executor {
			case translate.ExecutorWASM:
				var fns []string
				var loc, module string
				if e := w.execs[s.ID]; e != nil {
					loc, module = e.location, e.module.Name()
					for _, t := range e.spec.Transforms {
						fns = append(fns, comps.GetTransforms()[t.ID].GetUniqueName()+" -> "+t.DoFn)
					}
				}
				exec = "wasm " + loc
				msg = fmt.Sprintf("stage %s: executor WASM, module %s (%s), DoFns: %s", s.ID, module, loc, strings.Join(fns, ", "))
			default:
				exec = "harness " + s.EnvironmentID
				msg = fmt.Sprintf("stage %s: executor Fn API harness, environment %s, transforms %s", s.ID, s.EnvironmentID, transformNames(comps, s.Transforms))
			}
			msgs = append(msgs, msg)
			for _, id := range s.Transforms {
				t := p.GetComponents().GetTransforms()[id]
				if t == nil {
					continue // a runner-side rewrite (e.g. a lifted combine's parts)
				}
				if t.Annotations == nil {
					t.Annotations = map[string][]byte{}
				}
				t.Annotations[annotationExecutor] = []byte(exec)
				t.Annotations[annotationStage] = []byte(s.ID)
			}
		}
	}
	return msgs, p
}
