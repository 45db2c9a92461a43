package testkit

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// SchemaRegistry is a Confluent schema registry for tests: the two calls
// a reader makes (GET /schemas/ids/ID and /subjects/S/versions/latest),
// over schemas Register adds, served on URL until the test ends.
type SchemaRegistry struct {
	URL string

	mu       sync.Mutex
	byID     map[int]string
	subjects map[string][]int // ids by version
	gets     map[int]int      // fetches of each id
	user     string           // RequireBasicAuth's credentials
	password string
}

// RequireBasicAuth makes the registry answer only requests with these
// HTTP basic credentials (401 otherwise), as a registry behind
// authentication does.
func (r *SchemaRegistry) RequireBasicAuth(user, password string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.user, r.password = user, password
}

// NewSchemaRegistry starts a registry for t.
func NewSchemaRegistry(t testing.TB) *SchemaRegistry {
	r := &SchemaRegistry{byID: map[int]string{}, subjects: map[string][]int{}, gets: map[int]int{}}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// Register adds schema as subject's latest version and returns its id.
func (r *SchemaRegistry) Register(subject, schema string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := len(r.byID) + 1
	r.byID[id] = schema
	r.subjects[subject] = append(r.subjects[subject], id)
	return id
}

// Gets is how often schema id was fetched.
func (r *SchemaRegistry) Gets(id int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[id]
}

func (r *SchemaRegistry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	notFound := func(code int, msg string) {
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(map[string]any{"error_code": code, "message": msg})
	}
	if r.user != "" {
		if u, p, ok := req.BasicAuth(); !ok || u != r.user || p != r.password {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]any{"error_code": 40101, "message": "Unauthorized"})
			return
		}
	}
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case req.Method == http.MethodGet && len(parts) == 3 && parts[0] == "schemas" && parts[1] == "ids":
		id, _ := strconv.Atoi(parts[2])
		s, ok := r.byID[id]
		if !ok {
			notFound(40403, "Schema "+parts[2]+" not found")
			return
		}
		r.gets[id]++
		json.NewEncoder(w).Encode(map[string]any{"schema": s})
	case req.Method == http.MethodGet && len(parts) == 4 && parts[0] == "subjects" && parts[2] == "versions" && parts[3] == "latest":
		ids := r.subjects[parts[1]]
		if len(ids) == 0 {
			notFound(40401, "Subject '"+parts[1]+"' not found.")
			return
		}
		id := ids[len(ids)-1]
		json.NewEncoder(w).Encode(map[string]any{"subject": parts[1], "version": len(ids), "id": id, "schema": r.byID[id]})
	default:
		notFound(404, "not served by the test registry: "+req.Method+" "+req.URL.Path)
	}
}

// WireFormat is datum in Confluent's wire format: a 0 byte and schema id
// as 4 bytes before it.
func WireFormat(id int, datum []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), datum...)
}
