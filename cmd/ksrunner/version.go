package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

// runVersion prints the build's version: the module's (a tagged version,
// or "(devel)" for a build from a source tree), its VCS revision, time and
// whether the tree was modified (stamped by `go build`/`go install` in a
// repository; `go run` does not), the Go version and the Beam SDK's.
func runVersion(_ context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("version: unexpected arguments %q", args)
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(stdout, "ksrunner: no build information in this binary")
		return nil
	}
	fmt.Fprintf(stdout, "ksrunner %s (%s)\n", info.Main.Version, info.Main.Path)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		line := settings["vcs"] + " " + rev
		if t := settings["vcs.time"]; t != "" {
			line += " " + t
		}
		if settings["vcs.modified"] == "true" {
			line += " (modified)"
		}
		fmt.Fprintf(stdout, "  vcs:      %s\n", line)
	} else {
		fmt.Fprintln(stdout, "  vcs:      not stamped (go run, -buildvcs=false, or built outside a repository)")
	}
	fmt.Fprintf(stdout, "  go:       %s\n", info.GoVersion)
	for _, d := range info.Deps {
		switch d.Path {
		case "github.com/apache/beam/sdks/v2":
			fmt.Fprintf(stdout, "  beam sdk: %s\n", d.Version)
		case "github.com/twmb/franz-go":
			fmt.Fprintf(stdout, "  franz-go: %s\n", d.Version)
		}
	}
	return nil
}
