package expansion

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime/graphx"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/ksrunner/ksrunner/translate"
)

// Service is Beam's ExpansionService for the KafkaIO URNs.
type Service struct {
	jobpb.UnimplementedExpansionServiceServer
	logger *slog.Logger
}

// NewService returns the service; warnings of expansions go to logger.
func NewService(logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Service{logger: logger}
}

// Register registers the service on a gRPC server.
func (s *Service) Register(g *grpc.Server) { jobpb.RegisterExpansionServiceServer(g, s) }

// Expand answers an ExpansionRequest. A request it cannot expand is
// answered with the response's error, as Java's expansion service does,
// which the SDKs raise at pipeline construction.
func (s *Service) Expand(ctx context.Context, req *jobpb.ExpansionRequest) (*jobpb.ExpansionResponse, error) {
	res, warnings, err := Expand(req)
	name := req.GetTransform().GetUniqueName()
	for _, w := range warnings {
		s.logger.Warn("kafka io expansion: "+w, "transform", name)
	}
	if err != nil {
		s.logger.Info("kafka io expansion failed", "transform", name, "urn", req.GetTransform().GetSpec().GetUrn(), "error", err)
		return &jobpb.ExpansionResponse{Error: err.Error()}, nil
	}
	return res, nil
}

// DiscoverSchemaTransform lists the schema transforms Expand expands
// (SchemaTransforms): managed, kafka_read and kafka_write.
func (s *Service) DiscoverSchemaTransform(context.Context, *jobpb.DiscoverSchemaTransformRequest) (*jobpb.DiscoverSchemaTransformResponse, error) {
	return &jobpb.DiscoverSchemaTransformResponse{SchemaTransformConfigs: SchemaTransforms()}, nil
}

// Expand expands one KafkaIO transform into ksrunner's primitive, with
// the warnings to report (what the configuration asks that ksrunner does
// differently).
func Expand(req *jobpb.ExpansionRequest) (*jobpb.ExpansionResponse, []string, error) {
	t := req.GetTransform()
	urn := t.GetSpec().GetUrn()
	var (
		warnings []string
		out      *pipepb.PTransform
		comps    *pipepb.Components
		err      error
	)
	switch urn {
	case URNReadWithoutMetadata, URNReadWithMetadata:
		var spec *translate.KafkaRead
		spec, warnings, err = ConfigRead(t.GetSpec().GetPayload(), urn == URNReadWithMetadata)
		if err == nil {
			out, comps, err = expandRead(req, spec)
		}
	case URNWrite, URNWriteWithHeaders:
		var spec *translate.KafkaWrite
		spec, err = ConfigWrite(t.GetSpec().GetPayload(), urn == URNWriteWithHeaders)
		if err == nil {
			out, comps, err = expandWrite(req, spec)
		}
	case URNSchemaTransformPayload:
		// managed.Read/Write(managed.KAFKA), Beam YAML and the schema
		// transforms' own identifiers (schema.go).
		out, comps, warnings, err = expandSchemaTransform(req, t.GetSpec().GetPayload())
	default:
		return nil, nil, fmt.Errorf("ksrunner's expansion service expands KafkaIO only (%v, and the Kafka schema transforms as %s), not %q", URNs, URNSchemaTransformPayload, urn)
	}
	if err != nil {
		return nil, warnings, fmt.Errorf("%s (%s): %w", t.GetUniqueName(), urn, err)
	}
	return &jobpb.ExpansionResponse{Components: comps, Transform: out}, warnings, nil
}

// components is the request's components, which the response returns
// with what the expansion adds, as Java's expansion service does.
func components(req *jobpb.ExpansionRequest) *pipepb.Components {
	c := proto.Clone(req.GetComponents()).(*pipepb.Components)
	if c == nil {
		c = &pipepb.Components{}
	}
	if c.Transforms == nil {
		c.Transforms = map[string]*pipepb.PTransform{}
	}
	if c.Pcollections == nil {
		c.Pcollections = map[string]*pipepb.PCollection{}
	}
	if c.Coders == nil {
		c.Coders = map[string]*pipepb.Coder{}
	}
	if c.WindowingStrategies == nil {
		c.WindowingStrategies = map[string]*pipepb.WindowingStrategy{}
	}
	return c
}

func expandRead(req *jobpb.ExpansionRequest, spec *translate.KafkaRead) (*pipepb.PTransform, *pipepb.Components, error) {
	t := req.GetTransform()
	if len(t.GetInputs()) != 0 {
		return nil, nil, fmt.Errorf("a Kafka read has no inputs, got %d", len(t.GetInputs()))
	}
	payload, err := translate.EncodeKafkaRead(spec)
	if err != nil {
		return nil, nil, err
	}
	c := components(req)
	ns := req.GetNamespace()
	id := func(s string) string { return fmt.Sprintf("%s_ksrunner_%s", ns, s) }

	coder, err := addReadCoder(c, id, spec)
	if err != nil {
		return nil, nil, err
	}
	ws, err := addGlobalWindowing(c, ns, id("windowing"))
	if err != nil {
		return nil, nil, err
	}
	bounded := pipepb.IsBounded_UNBOUNDED
	if spec.Bounded() {
		bounded = pipepb.IsBounded_BOUNDED
	}
	pcol := id("output")
	c.Pcollections[pcol] = &pipepb.PCollection{
		UniqueName:          t.GetUniqueName() + ".output",
		CoderId:             coder,
		IsBounded:           bounded,
		WindowingStrategyId: ws,
	}
	// The output's local name: the one the request names (the Go SDK
	// sends its outputs), else Java's.
	tag := "output"
	for k := range t.GetOutputs() {
		if k != spec.ErrorOutput {
			tag = k
		}
	}
	outputs := map[string]string{tag: pcol}
	if spec.ErrorOutput != "" {
		// The error rows, as Java's ErrorHandling.errorSchemaBytes.
		b, err := proto.Marshal(translate.KafkaErrorSchema())
		if err != nil {
			return nil, nil, err
		}
		cid := id("errors")
		c.Coders[cid] = &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnRow, Payload: b}}
		errs := id("error_output")
		c.Pcollections[errs] = &pipepb.PCollection{
			UniqueName:          t.GetUniqueName() + "." + spec.ErrorOutput,
			CoderId:             cid,
			IsBounded:           bounded,
			WindowingStrategyId: ws,
		}
		outputs[spec.ErrorOutput] = errs
	}
	return &pipepb.PTransform{
		UniqueName:  t.GetUniqueName(),
		Spec:        &pipepb.FunctionSpec{Urn: translate.URNKafkaRead, Payload: payload},
		Outputs:     outputs,
		Annotations: t.GetAnnotations(),
	}, c, nil
}

func expandWrite(req *jobpb.ExpansionRequest, spec *translate.KafkaWrite) (*pipepb.PTransform, *pipepb.Components, error) {
	t := req.GetTransform()
	if len(t.GetInputs()) != 1 {
		return nil, nil, fmt.Errorf("a Kafka write has one input, got %d", len(t.GetInputs()))
	}
	for _, in := range t.GetInputs() {
		if err := checkWriteInput(req.GetComponents(), in, spec); err != nil {
			return nil, nil, err
		}
	}
	payload, err := translate.EncodeKafkaWrite(spec)
	if err != nil {
		return nil, nil, err
	}
	c := components(req)
	var outputs map[string]string
	if spec.ErrorOutput != "" {
		// The error rows, as Java's ErrorHandling.errorSchema of the
		// input's rows, in the input's windowing.
		var in *pipepb.PCollection
		for _, pc := range t.GetInputs() {
			in = c.GetPcollections()[pc]
		}
		inSchema := &pipepb.Schema{}
		if err := proto.Unmarshal(c.GetCoders()[in.GetCoderId()].GetSpec().GetPayload(), inSchema); err != nil {
			return nil, nil, fmt.Errorf("the input's row coder: its schema: %w", err)
		}
		b, err := proto.Marshal(translate.KafkaWriteErrorSchema(inSchema))
		if err != nil {
			return nil, nil, err
		}
		id := func(s string) string { return fmt.Sprintf("%s_ksrunner_%s", req.GetNamespace(), s) }
		c.Coders[id("write_errors")] = &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnRow, Payload: b}}
		errs := id("write_error_output")
		c.Pcollections[errs] = &pipepb.PCollection{
			UniqueName:          t.GetUniqueName() + "." + spec.ErrorOutput,
			CoderId:             id("write_errors"),
			IsBounded:           in.GetIsBounded(),
			WindowingStrategyId: in.GetWindowingStrategyId(),
		}
		outputs = map[string]string{spec.ErrorOutput: errs}
	}
	return &pipepb.PTransform{
		UniqueName:  t.GetUniqueName(),
		Spec:        &pipepb.FunctionSpec{Urn: translate.URNKafkaWrite, Payload: payload},
		Inputs:      t.GetInputs(),
		Outputs:     outputs,
		Annotations: t.GetAnnotations(),
	}, c, nil
}

// checkWriteInput checks the write's input is what its serializers write:
// KV<K, V> with K and V coded as the formats' values (possibly nullable),
// or a row with headers.
func checkWriteInput(c *pipepb.Components, pcol string, spec *translate.KafkaWrite) error {
	pc := c.GetPcollections()[pcol]
	if pc == nil {
		return fmt.Errorf("input PCollection %q is not in the request's components", pcol)
	}
	cd := c.GetCoders()[pc.GetCoderId()]
	urn := cd.GetSpec().GetUrn()
	if spec.PayloadRow {
		if urn != urnRow && spec.RowFormat != "" {
			return fmt.Errorf("a Kafka schema transform write of format %s writes rows: the input's coder is %s, not %s", spec.RowFormat, urn, urnRow)
		}
		if urn != urnRow {
			return fmt.Errorf("a Kafka schema transform write of format RAW writes rows of one BYTES field: the input's coder is %s, not %s", urn, urnRow)
		}
		schema := &pipepb.Schema{}
		if err := proto.Unmarshal(cd.GetSpec().GetPayload(), schema); err != nil {
			return fmt.Errorf("the input's row coder: its schema: %w", err)
		}
		if err := translate.CheckKafkaRowWriteSchema(spec, schema); err != nil {
			return fmt.Errorf("the input's rows: %w", err)
		}
		return nil
	}
	if spec.WithHeaders {
		if urn != urnRow {
			return fmt.Errorf("a write with headers writes rows (key, value, headers, topic, partition, timestamp): the input's coder is %s, not %s", urn, urnRow)
		}
		schema := &pipepb.Schema{}
		if err := proto.Unmarshal(cd.GetSpec().GetPayload(), schema); err != nil {
			return fmt.Errorf("the input's row coder: its schema: %w", err)
		}
		if err := translate.CheckKafkaWriteSchema(schema); err != nil {
			return fmt.Errorf("the input's rows: %w", err)
		}
		return nil
	}
	if urn != urnKV || len(cd.GetComponentCoderIds()) != 2 {
		return fmt.Errorf("a Kafka write writes KV<key, value>: the input's coder is %s, not %s", urn, urnKV)
	}
	for i, f := range []struct{ side, format string }{{"key", spec.KeyFormat}, {"value", spec.ValueFormat}} {
		elem := c.GetCoders()[cd.GetComponentCoderIds()[i]]
		if elem.GetSpec().GetUrn() == urnNullable && len(elem.GetComponentCoderIds()) == 1 {
			elem = c.GetCoders()[elem.GetComponentCoderIds()[0]]
		}
		want := map[string]string{translate.KafkaByteArray: urnBytes, translate.KafkaString: urnString,
			translate.KafkaLong: urnVarInt, translate.KafkaInteger: urnVarInt}[f.format]
		if got := elem.GetSpec().GetUrn(); got != want {
			return fmt.Errorf("the input's %s coder is %s, but the %s serializer writes %s values (coder %s)", f.side, got, f.side, f.format, want)
		}
	}
	return nil
}

// Beam's standard coders of the read's output.
const (
	urnBytes    = "beam:coder:bytes:v1"
	urnString   = "beam:coder:string_utf8:v1"
	urnVarInt   = "beam:coder:varint:v1"
	urnKV       = "beam:coder:kv:v1"
	urnNullable = "beam:coder:nullable:v1"
	urnRow      = "beam:coder:row:v1"
)

// addReadCoder adds the read's output coder, the one Java's expansion
// service gives it: KV<nullable(K), nullable(V)> without metadata (Java's
// Read.External resolves each deserializer's coder and wraps it in
// NullableCoder: Kafka keys and values may be null), and a row of
// ByteArrayKafkaRecord's schema with metadata.
func addReadCoder(c *pipepb.Components, id func(string) string, spec *translate.KafkaRead) (string, error) {
	add := func(name, urn string, payload []byte, comps ...string) string {
		cid := id(name)
		c.Coders[cid] = &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urn, Payload: payload}, ComponentCoderIds: comps}
		return cid
	}
	if spec.PayloadRow {
		s, err := spec.PayloadSchema()
		if err != nil {
			return "", err
		}
		b, err := proto.Marshal(s)
		if err != nil {
			return "", err
		}
		return add("payload", urnRow, b), nil
	}
	if spec.WithMetadata {
		if spec.KeyFormat != translate.KafkaByteArray || spec.ValueFormat != translate.KafkaByteArray {
			// As Java: "ExternalWithMetadata transform only supports keys
			// of type nullable(byte[])".
			return "", fmt.Errorf("a read with metadata needs ByteArrayDeserializer for key and value (its rows hold bytes), got %s and %s", spec.KeyFormat, spec.ValueFormat)
		}
		b, err := proto.Marshal(RecordSchema())
		if err != nil {
			return "", err
		}
		return add("record", urnRow, b), nil
	}
	elem := func(side, format string) string {
		var inner string
		switch format {
		case translate.KafkaByteArray:
			inner = add(side+"_bytes", urnBytes, nil)
		case translate.KafkaString:
			inner = add(side+"_string", urnString, nil)
		default: // Long, Integer
			inner = add(side+"_varint", urnVarInt, nil)
		}
		return add(side, urnNullable, nil, inner)
	}
	return add("kv", urnKV, nil, elem("key", spec.KeyFormat), elem("value", spec.ValueFormat)), nil
}

// RecordSchema is the row of a read with metadata (Java's
// KafkaIO.ByteArrayKafkaRecord): translate.KafkaRecordSchema, which the
// host encodes (host/internal/kafkaio) and translate checks the output
// coder against.
func RecordSchema() *pipepb.Schema { return translate.KafkaRecordSchema() }

// addGlobalWindowing adds the global windowing strategy (and its window
// coder) under id, as the Go SDK marshals it.
func addGlobalWindowing(c *pipepb.Components, ns, wsID string) (string, error) {
	cm := graphx.NewCoderMarshaller()
	cm.Namespace = ns + "_ksrunner" // the request's own coders are c<n>@ns
	ws, err := graphx.MarshalWindowingStrategy(cm, window.DefaultWindowingStrategy())
	if err != nil {
		return "", err
	}
	for k, v := range cm.Build() {
		c.Coders[k] = v
	}
	c.WindowingStrategies[wsID] = ws
	return wsID, nil
}
