package kafkastreams

import (
	"flag"
	"strings"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"

	"github.com/ksrunner/ksrunner/host"
)

// optionFlag is the flag of one job option. It holds the value as given:
// the Go SDK sends the flags a program set (flag.Visit) as pipeline options,
// as their String(), and the job server parses and checks them; a flag not
// given is not sent, so the job server's default applies.
type optionFlag struct {
	isBool bool
	list   bool // repeatable: values joined by commas
	value  string
}

func (f *optionFlag) String() string { return f.value }

func (f *optionFlag) Set(v string) error {
	if f.list && f.value != "" {
		f.value += "," + v
		return nil
	}
	f.value = v
	return nil
}

func (f *optionFlag) IsBoolFlag() bool { return f.isBool }

// defineFlags defines a flag on the command line for each of ksrunner's job
// options.
func defineFlags() {
	for _, d := range host.PipelineOptionDescriptors() {
		f := &optionFlag{
			isBool: d.GetType() == jobpb.PipelineOptionType_BOOLEAN,
			list:   d.GetType() == jobpb.PipelineOptionType_ARRAY,
		}
		usage := "ksrunner: " + d.GetDescription()
		if def := d.GetDefaultValue(); def != "" {
			usage += " (ksrunner's default: " + def + ")"
		}
		if f.list {
			usage += "; repeatable"
		}
		flag.Var(f, d.GetName(), strings.TrimSpace(usage))
	}
}
