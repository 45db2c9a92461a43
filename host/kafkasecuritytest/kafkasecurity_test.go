// Package kafkasecuritytest runs jobs on a real Kafka broker of its own
// with a SASL_SSL listener (TLS with client certificates; SASL PLAIN,
// SCRAM-SHA-256 and SCRAM-SHA-512): the runner's own security options and
// a pipeline's Java-style consumer and producer settings. It needs Java and
// the Kafka jars of .ci/kafka-broker.sh, so it runs where
// KSRUNNER_TEST_BOOTSTRAP is set (CI); its broker is never that one.
package kafkasecuritytest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/window"
	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal/extworker"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/ksrunner/ksrunner/host"
	"github.com/ksrunner/ksrunner/host/endpoint/testcerts"
	"github.com/ksrunner/ksrunner/host/internal/testkit"
	"github.com/ksrunner/ksrunner/host/jobtest"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
	"github.com/ksrunner/ksrunner/translate"
	"github.com/ksrunner/ksrunner/translate/pipelinetest"
)

var (
	loopback  *extworker.Loopback // the SDK worker pool every job's workers start in
	workerBin string              // an empty file staged as the (unused) worker binary
)

func init() {
	register.Function2x0(kafkaReadPlaceholder)
	register.Function3x2(keyByWindow)
	register.Function2x0(kafkaWritePlaceholder)
}

func TestMain(m *testing.M) {
	flag.Parse()
	beam.Init()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if loopback, err = extworker.StartLoopback(context.Background(), 0); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		return 1
	}
	defer loopback.Stop(context.Background())
	f, err := os.CreateTemp("", "kafkasecuritytest-worker-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		return 1
	}
	f.Close()
	workerBin = f.Name()
	defer os.Remove(workerBin)
	return m.Run()
}

// The placeholders stand for the Kafka primitives, which pipelinetest puts
// in their place in the proto.
func kafkaReadPlaceholder([]byte, func(string, int64)) {}
func kafkaWritePlaceholder(string, int64)              {}

// keyByWindow makes the window part of the key: "key@start".
func keyByWindow(w beam.Window, k string, n int64) (string, int64) {
	return fmt.Sprintf("%s@%d", k, w.(window.IntervalWindow).Start.Milliseconds()), n
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func submit(ctx context.Context, t *testing.T, client jobpb.JobServiceClient, pipe *pipepb.Pipeline, opts map[string]string) (string, error) {
	t.Helper()
	return jobtest.Submit(ctx, t, client, workerBin, pipe, opts)
}

// secureBroker is a real Kafka broker of this test's own (never the shared
// one), started with .ci/kafka-broker.sh: a PLAINTEXT listener (the
// script's readiness probe, and the test's own setup and checks) and a
// SASL_SSL one (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; a server certificate
// of the test's CA; client certificates of that CA required).
type secureBroker struct {
	plain, secure string // bootstrap addresses
	dir           string
	caFile        string // the CA's certificate
	clientCert    string // a client certificate of the CA, and its key
	clientKey     string
	clientStore   string // key and certificate in one file (a Kafka PEM key store)
}

// startSecureBroker starts the broker and stops it when the test ends. It
// needs Java and the Kafka jars (the script fetches them with Maven), as
// CI has them: the test runs where KSRUNNER_TEST_BOOTSTRAP is set.
func startSecureBroker(t *testing.T) *secureBroker {
	t.Helper()
	if !kafkatest.IsReal() {
		t.Skip("needs a real Kafka broker of its own, started with .ci/kafka-broker.sh (Java, the Kafka jars): set " + kafkatest.EnvBootstrap + " as CI does")
	}
	script := kafkatest.BrokerScript(t)
	dir := t.TempDir()
	ports := kafkatest.FreePorts(t, 3)
	b := &secureBroker{
		plain:  fmt.Sprintf("127.0.0.1:%d", ports[0]),
		secure: fmt.Sprintf("127.0.0.1:%d", ports[2]),
		dir:    dir,
	}
	ca := testcerts.NewCA(t, "ksrunner test CA")
	server := ca.Issue(t, "kafka broker", "127.0.0.1", "localhost")
	client := ca.Issue(t, "ksrunner")
	b.caFile = testcerts.Write(t, dir, "ca.pem", ca.PEM)
	b.clientCert = testcerts.Write(t, dir, "client.pem", client.CertPEM)
	b.clientKey = testcerts.Write(t, dir, "client-key.pem", client.KeyPEM)
	b.clientStore = testcerts.Write(t, dir, "client-store.pem", append(append([]byte{}, client.KeyPEM...), client.CertPEM...))
	serverStore := testcerts.Write(t, dir, "broker-store.pem", append(append([]byte{}, server.KeyPEM...), server.CertPEM...))
	extra := testcerts.Write(t, dir, "extra.properties", []byte(fmt.Sprintf(`listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d,SASL_SSL://127.0.0.1:%[3]d
advertised.listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d,SASL_SSL://127.0.0.1:%[3]d
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=%[4]s
listener.name.sasl_ssl.ssl.truststore.type=PEM
listener.name.sasl_ssl.ssl.truststore.location=%[5]s
listener.name.sasl_ssl.ssl.client.auth=required
`, ports[0], ports[1], ports[2], serverStore, b.caFile)))
	env := append(os.Environ(),
		fmt.Sprintf("KSRUNNER_KAFKA_PORT=%d", ports[0]),
		fmt.Sprintf("KSRUNNER_KAFKA_CONTROLLER_PORT=%d", ports[1]),
		"KSRUNNER_KAFKA_HOST=127.0.0.1",
		"KSRUNNER_KAFKA_DIR="+filepath.Join(dir, "broker"),
		"KSRUNNER_KAFKA_EXTRA_CONFIG="+extra,
		"KSRUNNER_KAFKA_HEAP=-Xms128m -Xmx512m",
		"KSRUNNER_KAFKA_KEEP_DATA=",
	)
	run := func(args ...string) (string, error) {
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		if err != nil {
			return "", fmt.Errorf("%s %s: %v\n%s", script, strings.Join(args, " "), err, errOut.String())
		}
		return strings.TrimSpace(out.String()), nil
	}
	t.Cleanup(func() {
		if _, err := run("stop"); err != nil {
			t.Logf("stopping the SASL_SSL broker: %v", err)
		}
	})
	start := time.Now()
	got, err := run("up")
	if err != nil {
		t.Fatalf("starting a SASL_SSL broker: %v", err)
	}
	if got != b.plain {
		t.Fatalf("the broker script printed %q, want %q", got, b.plain)
	}
	t.Logf("SASL_SSL broker on %s (PLAINTEXT %s) up in %v", b.secure, b.plain, time.Since(start).Round(time.Millisecond))
	return b
}

// addSCRAM creates SCRAM credentials (over the PLAINTEXT listener) and
// waits until the SASL_SSL listener accepts them.
func (b *secureBroker) addSCRAM(ctx context.Context, t *testing.T, user, password string, m kadm.ScramMechanism) {
	t.Helper()
	adm := kadm.NewClient(kafkatest.Client(t, b.plain))
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: m, Iterations: 4096, Password: password}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("creating SCRAM credentials of %s: %v", user, err)
	}
	sec, err := host.KafkaSecurity{Protocol: "SASL_SSL", Mechanism: m.String(), Username: user,
		PasswordFile: testcerts.Write(t, b.dir, "probe-"+user, []byte(password)), CAFile: b.caFile, CertFile: b.clientCert, KeyFile: b.clientKey}.Load()
	if err != nil {
		t.Fatal(err)
	}
	mech := scram.Auth{User: user, Pass: password}.AsSha256Mechanism()
	if m == kadm.ScramSha512 {
		mech = scram.Auth{User: user, Pass: password}.AsSha512Mechanism()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.secure), kgo.DialTLSConfig(sec.TLS), kgo.SASL(mech))
		if err != nil {
			t.Fatal(err)
		}
		_, err = kadm.NewClient(cl).ListTopics(ctx)
		cl.Close()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the SASL_SSL listener does not accept %s's SCRAM credentials 30s after their creation: %v", user, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// securePipeline reads String/Long records from in (a bounded read of n
// records, from the earliest), sums them per key in one-minute windows
// (on LOOPBACK SDK workers: a GroupByKey, so repartition and changelog
// topics) and writes "key@window start" -> sum to out; readConf and
// writeConf are added to the read's consumer and the write's producer
// config.
func securePipeline(t *testing.T, in, out string, n int64, readConf, writeConf map[string]string) *pipepb.Pipeline {
	t.Helper()
	p, s := beam.NewPipelineWithRoot()
	recs := beam.ParDo(s, kafkaReadPlaceholder, beam.Impulse(s))
	sums := stats.SumPerKey(s, beam.WindowInto(s, window.NewFixedWindows(time.Minute), recs))
	beam.ParDo0(s, kafkaWritePlaceholder, beam.WindowInto(s, window.NewGlobalWindows(), beam.ParDo(s, keyByWindow, sums)))
	pipe := jobtest.MarshalLoopback(t, p, loopback.EnvironmentConfig, workerBin)
	consumer := map[string]string{"auto.offset.reset": "earliest"}
	for k, v := range readConf {
		consumer[k] = v
	}
	rb, err := translate.EncodeKafkaRead(&translate.KafkaRead{Topics: []string{in}, KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaLong,
		TimestampPolicy: translate.TimestampCreateTime, ConsumerConfig: consumer, MaxNumRecords: &n})
	if err != nil {
		t.Fatal(err)
	}
	wb, err := translate.EncodeKafkaWrite(&translate.KafkaWrite{Topic: out, KeyFormat: translate.KafkaString, ValueFormat: translate.KafkaLong, ProducerConfig: writeConf})
	if err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSource(pipe, "kafkaReadPlaceholder", translate.URNKafkaRead, rb); err != nil {
		t.Fatal(err)
	}
	if err := pipelinetest.AsSink(pipe, "kafkaWritePlaceholder", translate.URNKafkaWrite, wb); err != nil {
		t.Fatal(err)
	}
	return pipe
}

// secureServer is a job server whose jobs run on brokers, connecting per
// the options.
func secureServer(t *testing.T, brokers string, options ...host.ServerOption) (jobpb.JobServiceClient, *testkit.SyncBuffer) {
	t.Helper()
	opts := host.DefaultOptions()
	opts.BootstrapServers = brokers
	logs := &testkit.SyncBuffer{}
	srv, err := host.NewJobServer("127.0.0.1:0", opts, slog.New(slog.NewTextHandler(io.MultiWriter(logs, debugOut()), nil)), options...)
	if err != nil {
		t.Fatal(err)
	}
	return jobtest.Serve(t, srv), logs
}

func debugOut() io.Writer {
	if os.Getenv("KSRUNNER_DEBUG") != "" {
		return os.Stderr
	}
	return io.Discard
}

// TestKafkaSASLSSL runs jobs on a SASL_SSL listener that also requires a
// client certificate:
//   - with the runner's own options (SCRAM-SHA-256, CA, client
//     certificate) and a pipeline without security settings;
//   - with a runner without options and the pipeline's Kafka read and
//     write giving them as Kafka's Java client does (SASL_SSL, PLAIN in
//     sasl.jaas.config, PEM trust and key stores);
//
// each job's output is complete, and its internal topics were on the
// SASL_SSL listener (the job ran there only). A wrong password (SCRAM-SHA-512),
// and no client certificate, fail the submission with an authentication
// error naming the broker.
func TestKafkaSASLSSL(t *testing.T) {
	b := startSecureBroker(t)
	ctx := testContext(t, 5*time.Minute)
	b.addSCRAM(ctx, t, "runner", "runner-secret", kadm.ScramSha256)
	b.addSCRAM(ctx, t, "bob", "bob-secret", kadm.ScramSha512)
	in := kafkatest.UniqueName(t, "sin")
	out1, out2 := kafkatest.UniqueName(t, "sout1"), kafkatest.UniqueName(t, "sout2")
	want := kafkatest.FillCountTopics(ctx, t, b.plain, in, out1)
	kafkatest.CreateTopic(t, b.plain, out2, kafkatest.CountOutPartitions)
	const records = 400 // FillCountTopics writes this many

	runner := host.KafkaSecurity{Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-256", Username: "runner",
		PasswordFile: testcerts.Write(t, b.dir, "runner-password", []byte("runner-secret\n")),
		CAFile:       b.caFile, CertFile: b.clientCert, KeyFile: b.clientKey}
	run := func(t *testing.T, client jobpb.JobServiceClient, pipe *pipepb.Pipeline, out string) {
		t.Helper()
		app := kafkatest.UniqueName(t, "sec")
		id, err := submit(ctx, t, client, pipe, map[string]string{"application_id": app, "internal_parallelism": "2"})
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		r, err := jobtest.Wait(ctx, client, id)
		if err != nil || r.State != jobpb.JobState_DONE {
			t.Fatalf("job ended %v (errors %q, %v), want DONE", r.State, r.Errors, err)
		}
		kafkatest.CheckCounts(t, "output", kafkatest.ReadCounts(ctx, t, b.plain, out, -1), want)
		// Its internal topics are on the cluster (created over SASL_SSL).
		topics, err := kadm.NewClient(kafkatest.Client(t, b.plain)).ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !topics.Has("__beam_" + app + "_pipeline") {
			t.Errorf("no pipeline topic of application %s: %v", app, topics.Names())
		}
	}

	t.Run("runner options, SCRAM-SHA-256", func(t *testing.T) {
		client, logs := secureServer(t, b.secure, host.WithKafkaSecurity(runner))
		run(t, client, securePipeline(t, in, out1, records, nil, nil), out1)
		if l := logs.String(); !strings.Contains(l, "kafka=\"SASL_SSL, SCRAM-SHA-256 as runner, with a client certificate (the runner's options)\"") {
			t.Errorf("the job server did not log its Kafka security: %s", l)
		}
	})

	t.Run("pipeline's consumer and producer config, PLAIN", func(t *testing.T) {
		conf := map[string]string{
			"security.protocol":       "SASL_SSL",
			"sasl.mechanism":          "PLAIN",
			"sasl.jaas.config":        `org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret";`,
			"ssl.truststore.type":     "PEM",
			"ssl.truststore.location": b.caFile,
			"ssl.keystore.type":       "PEM",
			"ssl.keystore.location":   b.clientStore,
		}
		client, _ := secureServer(t, b.secure) // no Kafka security of its own
		run(t, client, securePipeline(t, in, out2, records, conf, conf), out2)
	})

	t.Run("wrong password, SCRAM-SHA-512", func(t *testing.T) {
		wrong := runner
		wrong.Mechanism, wrong.Username = "SCRAM-SHA-512", "bob"
		wrong.PasswordFile = testcerts.Write(t, b.dir, "wrong-password", []byte("not-bobs\n"))
		client, _ := secureServer(t, b.secure, host.WithKafkaSecurity(wrong))
		_, err := submit(ctx, t, client, securePipeline(t, in, out1, records, nil, nil), map[string]string{"application_id": kafkatest.UniqueName(t, "wrong")})
		for _, w := range []string{"Kafka authentication with broker " + b.secure + " failed (SASL_SSL, SCRAM-SHA-512 as bob", "SASL_AUTHENTICATION_FAILED"} {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("submit: %v\nwant an error containing %q", err, w)
			}
		}
		if strings.Contains(err.Error(), "not-bobs") {
			t.Errorf("the error shows the password: %v", err)
		}
		t.Logf("refused: %v", err)
	})

	t.Run("no client certificate", func(t *testing.T) {
		noCert := runner
		noCert.CertFile, noCert.KeyFile = "", ""
		client, _ := secureServer(t, b.secure, host.WithKafkaSecurity(noCert))
		_, err := submit(ctx, t, client, securePipeline(t, in, out1, records, nil, nil), map[string]string{"application_id": kafkatest.UniqueName(t, "nocert")})
		if err == nil || !strings.Contains(err.Error(), "Kafka authentication with broker "+b.secure+" failed (SASL_SSL, SCRAM-SHA-256 as runner") {
			t.Fatalf("submit: %v\nwant an authentication error naming the broker", err)
		}
		t.Logf("refused: %v", err)
	})
}
