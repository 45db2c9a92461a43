package application

import (
	"fmt"
	"os"
	"path/filepath"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
)

const urnArtifactFile = "beam:artifact:type:file:v1"

// ReadArtifacts reads the files the pipeline's environments depend on that
// the job server staged (under stageDir), by their path in the pipeline.
// Other dependencies travel as they are: embedded ones carry their data,
// and a file outside stageDir was not staged by the job server, so it is
// not read from its disk on the pipeline's say-so.
func ReadArtifacts(p *pipepb.Pipeline, stageDir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for envID, env := range p.GetComponents().GetEnvironments() {
		for n, dep := range env.GetDependencies() {
			if dep.GetTypeUrn() != urnArtifactFile {
				continue
			}
			var fp pipepb.ArtifactFilePayload
			if err := proto.Unmarshal(dep.GetTypePayload(), &fp); err != nil {
				return nil, fmt.Errorf("environment %s dependency %d: %w", envID, n, err)
			}
			if _, ok := out[fp.GetPath()]; ok {
				continue
			}
			if rel, err := filepath.Rel(stageDir, fp.GetPath()); err != nil || !filepath.IsLocal(rel) {
				continue
			}
			b, err := os.ReadFile(fp.GetPath())
			if err != nil {
				return nil, fmt.Errorf("environment %s dependency %d: %w", envID, n, err)
			}
			out[fp.GetPath()] = b
		}
	}
	return out, nil
}

// Materialize writes the Spec's artifacts as files under dir and returns a
// copy of its pipeline whose environments depend on them there, for a
// process that did not stage them.
func (s *Spec) Materialize(dir string) (*pipepb.Pipeline, error) {
	p := proto.Clone(s.Pipeline).(*pipepb.Pipeline)
	written := map[string]string{}
	for envID, env := range p.GetComponents().GetEnvironments() {
		for n, dep := range env.GetDependencies() {
			if dep.GetTypeUrn() != urnArtifactFile {
				continue
			}
			var fp pipepb.ArtifactFilePayload
			if err := proto.Unmarshal(dep.GetTypePayload(), &fp); err != nil {
				return nil, fmt.Errorf("environment %s dependency %d: %w", envID, n, err)
			}
			local, ok := written[fp.GetPath()]
			if !ok {
				b, have := s.Artifacts[fp.GetPath()]
				if !have {
					continue // not staged: left as the submitter declared it
				}
				local = filepath.Join(dir, fmt.Sprintf("artifact-%d-%s", len(written), filepath.Base(fp.GetPath())))
				if err := os.WriteFile(local, b, 0o644); err != nil {
					return nil, fmt.Errorf("environment %s dependency %d: %w", envID, n, err)
				}
				written[fp.GetPath()] = local
			}
			fp.Path = local
			b, err := proto.Marshal(&fp)
			if err != nil {
				return nil, err
			}
			dep.TypePayload = b
		}
	}
	return p, nil
}
