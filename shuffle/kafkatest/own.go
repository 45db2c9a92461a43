package kafkatest

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// OwnBroker starts a real Kafka broker of the test's own (never the shared
// one of KSRUNNER_TEST_BOOTSTRAP) with .ci/kafka-broker.sh, on free
// loopback ports and a temporary directory, with serverProperties (lines
// of server.properties, "" for none) added to its configuration, and
// returns its bootstrap address; the test's end kills it. For tests that
// need a broker configured otherwise than the shared one. It runs where
// KSRUNNER_TEST_BOOTSTRAP is set (CI has Java and the Kafka jars there)
// and skips elsewhere, saying why.
func OwnBroker(t testing.TB, serverProperties string) string {
	t.Helper()
	if !IsReal() {
		t.Skipf("a broker of the test's own runs only where %s is set (it needs Java and the Kafka jars of .ci/kafka-broker.sh)", EnvBootstrap)
	}
	script := BrokerScript(t)
	dir := t.TempDir()
	ports := FreePorts(t, 2)
	env := append(os.Environ(),
		"KSRUNNER_KAFKA_NODES=1",
		"KSRUNNER_KAFKA_PORT="+strconv.Itoa(ports[0]),
		"KSRUNNER_KAFKA_CONTROLLER_PORT="+strconv.Itoa(ports[1]),
		"KSRUNNER_KAFKA_DIR="+filepath.Join(dir, "kafka"),
		"KSRUNNER_KAFKA_KEEP_DATA=",
		"KSRUNNER_KAFKA_HEAP=-Xms128m -Xmx512m",
		"KSRUNNER_KAFKA_READY_TIMEOUT=300",
	)
	if serverProperties != "" {
		extra := filepath.Join(dir, "extra.properties")
		if err := os.WriteFile(extra, []byte(serverProperties+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		env = append(env, "KSRUNNER_KAFKA_EXTRA_CONFIG="+extra)
	}
	run := func(args ...string) (string, error) {
		c := exec.Command("bash", append([]string{script}, args...)...)
		c.Env = env
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		if err != nil {
			return "", &scriptError{args: args, err: err, stderr: stderr.String()}
		}
		return stdout.String(), nil
	}
	t.Cleanup(func() {
		if _, err := run("kill-node", "1"); err != nil {
			t.Log(err)
		}
	})
	out, err := run("up")
	if err != nil {
		t.Fatal(err)
	}
	out = strings.TrimSpace(out)
	return strings.TrimSpace(out[strings.LastIndex(out, "\n")+1:])
}

type scriptError struct {
	args   []string
	err    error
	stderr string
}

func (e *scriptError) Error() string {
	return "kafka-broker.sh " + strings.Join(e.args, " ") + ": " + e.err.Error() + "\n" + e.stderr
}

// BrokerScript is .ci/kafka-broker.sh, found above the test's directory.
func BrokerScript(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, ".ci", "kafka-broker.sh")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal(".ci/kafka-broker.sh not found above the test's directory")
		}
		dir = parent
	}
}

// FreePorts are n ports free on loopback now.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
