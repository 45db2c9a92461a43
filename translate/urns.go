package translate

import (
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// beamURN returns the beam_urn option of a standard enum value.
func beamURN[E interface {
	~int32
	Descriptor() protoreflect.EnumDescriptor
}](v E) string {
	return proto.GetExtension(v.Descriptor().Values().ByNumber(protoreflect.EnumNumber(v)).Options(), pipepb.E_BeamUrn).(string)
}

// URNs the translator knows. They are read from the model protos so that they
// cannot drift from the Beam version in go.mod.
var (
	urnImpulse = beamURN(pipepb.StandardPTransforms_IMPULSE)
	urnParDo   = beamURN(pipepb.StandardPTransforms_PAR_DO)

	urnSideInputIterable = "beam:side_input:iterable:v1"
	urnSideInputMultimap = "beam:side_input:multimap:v1"
	urnGBK               = beamURN(pipepb.StandardPTransforms_GROUP_BY_KEY)
	urnFlatten           = beamURN(pipepb.StandardPTransforms_FLATTEN)
	urnWindowInto        = beamURN(pipepb.StandardPTransforms_ASSIGN_WINDOWS)
	urnTestStream        = beamURN(pipepb.StandardPTransforms_TEST_STREAM)

	urnCombinePerKey            = beamURN(pipepb.StandardPTransforms_COMBINE_PER_KEY)
	urnReshuffle                = beamURN(pipepb.StandardPTransforms_RESHUFFLE)
	urnRedistributeArbitrarily  = beamURN(pipepb.StandardPTransforms_REDISTRIBUTE_ARBITRARILY)
	urnRedistributeByKey        = beamURN(pipepb.StandardPTransforms_REDISTRIBUTE_BY_KEY)
	urnCombinePrecombine        = beamURN(pipepb.StandardPTransforms_COMBINE_PER_KEY_PRECOMBINE)
	urnCombineMergeAccumulators = beamURN(pipepb.StandardPTransforms_COMBINE_PER_KEY_MERGE_ACCUMULATORS)
	urnCombineExtractOutputs    = beamURN(pipepb.StandardPTransforms_COMBINE_PER_KEY_EXTRACT_OUTPUTS)
	urnSDFPairWithRestriction   = beamURN(pipepb.StandardPTransforms_PAIR_WITH_RESTRICTION)
	urnSDFSplitAndSize          = beamURN(pipepb.StandardPTransforms_SPLIT_AND_SIZE_RESTRICTIONS)
	urnSDFProcessSizedElements  = beamURN(pipepb.StandardPTransforms_PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS)
	urnDataSource               = "beam:runner:source:v1"
	urnDataSink                 = "beam:runner:sink:v1"

	urnCoderBytes      = beamURN(pipepb.StandardCoders_BYTES)
	urnCoderStringUTF8 = beamURN(pipepb.StandardCoders_STRING_UTF8)
	urnCoderVarInt     = beamURN(pipepb.StandardCoders_VARINT)
	urnCoderDouble     = beamURN(pipepb.StandardCoders_DOUBLE)
	urnCoderBool       = beamURN(pipepb.StandardCoders_BOOL)
	urnCoderKV         = beamURN(pipepb.StandardCoders_KV)
	urnCoderIterable   = beamURN(pipepb.StandardCoders_ITERABLE)
	// urnCoderStateBackedIterable is only declared by translate, to the SDK,
	// for groups it may page (Stage.PagedGroups); no pipeline's coder.
	urnCoderStateBackedIterable = beamURN(pipepb.StandardCoders_STATE_BACKED_ITERABLE)
	urnCoderLengthPrefix        = beamURN(pipepb.StandardCoders_LENGTH_PREFIX)
	urnCoderGlobalWindow        = beamURN(pipepb.StandardCoders_GLOBAL_WINDOW)
	urnCoderIntervalWindow      = beamURN(pipepb.StandardCoders_INTERVAL_WINDOW)
	urnCoderWindowedValue       = beamURN(pipepb.StandardCoders_WINDOWED_VALUE)
	urnCoderTimer               = beamURN(pipepb.StandardCoders_TIMER)

	urnReqSplittableDoFn     = beamURN(pipepb.StandardRequirements_REQUIRES_SPLITTABLE_DOFN)
	urnReqStatefulProcessing = beamURN(pipepb.StandardRequirements_REQUIRES_STATEFUL_PROCESSING)
	urnReqBundleFinalization = beamURN(pipepb.StandardRequirements_REQUIRES_BUNDLE_FINALIZATION)
	urnReqStableInput        = beamURN(pipepb.StandardRequirements_REQUIRES_STABLE_INPUT)
	urnReqTimeSortedInput    = beamURN(pipepb.StandardRequirements_REQUIRES_TIME_SORTED_INPUT)
	urnReqOnWindowExpiration = beamURN(pipepb.StandardRequirements_REQUIRES_ON_WINDOW_EXPIRATION)
)

// sdkLeafURNs are the leaf URNs executed by the SDK inside a fused stage.
// The combine and SDF component URNs appear after this package's own
// expansions (and are accepted as input so a rewritten pipeline translates
// again).
var sdkLeafURNs = map[string]bool{
	urnParDo:                    true,
	urnWindowInto:               true,
	urnCombinePrecombine:        true,
	urnCombineMergeAccumulators: true,
	urnCombineExtractOutputs:    true,
	urnSDFPairWithRestriction:   true,
	urnSDFSplitAndSize:          true,
	urnSDFProcessSizedElements:  true,
}

// redistributeURNs are the composites the host executes as a redistribute
// topic with a passthrough root.
var redistributeURNs = map[string]bool{
	urnReshuffle:               true,
	urnRedistributeArbitrarily: true,
	urnRedistributeByKey:       true,
}

// hostCoderURNs are the coders the host can parse; anything else crossing the
// host boundary is wrapped in a length prefix.
var hostCoderURNs = map[string]bool{
	urnCoderBytes:          true,
	urnCoderStringUTF8:     true,
	urnCoderVarInt:         true,
	urnCoderDouble:         true,
	urnCoderBool:           true,
	urnCoderNullable:       true,
	urnCoderKV:             true,
	urnCoderIterable:       true,
	urnCoderLengthPrefix:   true,
	urnCoderGlobalWindow:   true,
	urnCoderIntervalWindow: true,
	urnCoderWindowedValue:  true,
}
