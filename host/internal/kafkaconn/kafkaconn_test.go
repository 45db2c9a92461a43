package kafkaconn

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ksrunner/ksrunner/host/endpoint/testcerts"
)

// TestConfigCheck: combinations of the runner's Kafka security options
// that cannot work are refused, naming the option.
func TestConfigCheck(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Protocol: "SASL_TLS"}, `option security_protocol: "SASL_TLS"`},
		{Config{Protocol: "SASL_SSL"}, "option sasl_mechanism: required"},
		{Config{Protocol: "SASL_SSL", Mechanism: "GSSAPI"}, `option sasl_mechanism: "GSSAPI"`},
		{Config{Protocol: "SASL_SSL", Mechanism: "PLAIN"}, "option sasl_username: required"},
		{Config{Protocol: "SASL_PLAINTEXT", Mechanism: "PLAIN", Username: "u"}, "option sasl_password_file: required"},
		{Config{Protocol: "SSL", Mechanism: "PLAIN"}, "option sasl_mechanism: set, but security_protocol SSL does not use SASL"},
		{Config{Username: "u"}, "option sasl_username: set, but security_protocol PLAINTEXT"},
		{Config{CAFile: "ca"}, "option ssl_ca_file: set, but security_protocol PLAINTEXT does not use TLS"},
		{Config{Protocol: "SASL_PLAINTEXT", Mechanism: "PLAIN", Username: "u", PasswordFile: "p", CAFile: "ca"}, "option ssl_ca_file: set, but security_protocol SASL_PLAINTEXT"},
		{Config{Protocol: "SSL", CertFile: "c"}, "options ssl_cert_file and ssl_key_file"},
	} {
		if err := c.cfg.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if err := (Config{Protocol: "sasl_ssl", Mechanism: "scram-sha-512", Username: "u", PasswordFile: "p"}).Check(); err != nil {
		t.Errorf("lower case values: %v", err)
	}
}

// TestConfigLoad reads the password (without its newline), the CA and the
// client certificate; unreadable or bad files fail naming the option.
func TestConfigLoad(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	client := ca.Issue(t, "client")
	pw := testcerts.Write(t, dir, "pw", []byte("hunter2\n"))
	caFile := testcerts.Write(t, dir, "ca.pem", ca.PEM)
	cert := testcerts.Write(t, dir, "c.pem", client.CertPEM)
	key := testcerts.Write(t, dir, "k.pem", client.KeyPEM)
	s, err := Config{Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-256", Username: "alice", PasswordFile: pw, CAFile: caFile, CertFile: cert, KeyFile: key}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if s.Password != "hunter2" || s.Username != "alice" || s.TLS == nil || s.TLS.RootCAs == nil || len(s.TLS.Certificates) != 1 {
		t.Errorf("loaded %+v", s)
	}
	if d := s.Describe(); d != "SASL_SSL, SCRAM-SHA-256 as alice, with a client certificate (the runner's options)" || strings.Contains(d, "hunter2") {
		t.Errorf("Describe: %q", d)
	}
	if len(Opts("a:1, b:2", s)) != 3 {
		t.Errorf("Opts: want seeds, TLS and SASL")
	}
	if got := SplitBrokers(" a:1, ,b:2 "); fmt.Sprint(got) != "[a:1 b:2]" {
		t.Errorf("SplitBrokers: %q", got)
	}
	if s, err := (Config{}).Load(); s != nil || err != nil {
		t.Errorf("PLAINTEXT: %v, %v; want nil", s, err)
	}
	junk := testcerts.Write(t, dir, "junk", []byte("junk"))
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Protocol: "SASL_PLAINTEXT", Mechanism: "PLAIN", Username: "u", PasswordFile: filepath.Join(dir, "none")}, "option sasl_password_file"},
		{Config{Protocol: "SASL_PLAINTEXT", Mechanism: "PLAIN", Username: "u", PasswordFile: testcerts.Write(t, dir, "emptypw", []byte("\n"))}, "option sasl_password_file: " + filepath.Join(dir, "emptypw") + " is empty"},
		{Config{Protocol: "SSL", CAFile: junk}, "option ssl_ca_file: " + junk + ": no PEM certificate"},
		{Config{Protocol: "SSL", CertFile: cert, KeyFile: junk}, "options ssl_cert_file and ssl_key_file"},
	} {
		if _, err := c.cfg.Load(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	os.Remove(pw)
}

// TestExplain: authentication errors name the brokers and how the client
// connected (never the password); others pass through.
func TestExplain(t *testing.T) {
	s := &Security{Protocol: SASLSSL, Mechanism: MechanismScramSHA512, Username: "bob", Password: "pw", Source: "the runner's options"}
	err := Explain(fmt.Errorf("creating the pipeline topic x: %w", kerr.SaslAuthenticationFailed), "127.0.0.1:9093, 127.0.0.1:9094", s)
	want := "Kafka authentication with broker 127.0.0.1:9093,127.0.0.1:9094 failed (SASL_SSL, SCRAM-SHA-512 as bob (the runner's options))"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "pw)") || !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Errorf("Explain: %v, want %q", err, want)
	}
	if again := Explain(err, "other:1", nil); again != err {
		t.Errorf("explained twice: %v", again)
	}
	plain := errors.New("topic not found")
	if Explain(plain, "a:1", s) != plain {
		t.Error("a non-authentication error was wrapped")
	}
}
