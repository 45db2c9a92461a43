package kafkaio

import (
	"crypto/tls"
	"strings"
	"testing"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/host/endpoint/testcerts"
	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/translate"
)

const scramJAAS = `org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="p\"w;d";`

// TestParseSecurity: the Java client's security keys ksrunner honours
// parse; a key or value it does not honour is an error naming it, which
// never quotes the JAAS config (it holds the password).
func TestParseSecurity(t *testing.T) {
	s, err := ParseSecurity(map[string]string{
		"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": scramJAAS,
		"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
		"ssl.keystore.type": "pem", "ssl.keystore.location": "/client.pem",
		"ssl.endpoint.identification.algorithm": "", "ssl.enabled.protocols": "TLSv1.3", "ssl.protocol": "TLSv1.3",
		"auto.offset.reset": "earliest",
	}, "consumer_config")
	if err != nil {
		t.Fatal(err)
	}
	want := Security{Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-512", Username: "alice", Password: `p"w;d`,
		TruststoreLocation: "/ca.pem", KeystoreLocation: "/client.pem", NoHostnameCheck: true, MinTLS: tls.VersionTLS13, MaxTLS: tls.VersionTLS13}
	if *s != want {
		t.Errorf("parsed %+v\nwant   %+v", *s, want)
	}
	if s, err := ParseSecurity(map[string]string{"auto.offset.reset": "earliest"}, "consumer_config"); s != nil || err != nil {
		t.Errorf("no security keys: %v, %v", s, err)
	}
	plainJAAS := `org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="secret-pw";`
	for _, c := range []struct {
		name string
		conf map[string]string
		want string
	}{
		{"unsupported key", map[string]string{"security.protocol": "SASL_SSL", "sasl.kerberos.service.name": "kafka"}, "consumer_config sasl.kerberos.service.name is not supported"},
		{"store password", map[string]string{"security.protocol": "SSL", "ssl.truststore.password": "x"}, "consumer_config ssl.truststore.password is not supported"},
		{"key password", map[string]string{"security.protocol": "SSL", "ssl.key.password": "x"}, "ssl.key.password is not supported"},
		{"protocol", map[string]string{"security.protocol": "SASL_TLS"}, `security.protocol="SASL_TLS": want one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL`},
		{"GSSAPI default", map[string]string{"security.protocol": "SASL_SSL", "sasl.jaas.config": plainJAAS}, "sasl.mechanism: not set, and Kafka's default, GSSAPI (Kerberos), is not supported"},
		{"OAUTHBEARER", map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, `sasl.mechanism="OAUTHBEARER": not supported`},
		{"no JAAS", map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config: required"},
		{"login module", map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": plainJAAS}, "login module org.apache.kafka.common.security.plain.PlainLoginModule does not go with sasl.mechanism SCRAM-SHA-256"},
		{"JAAS option", map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": `org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="secret-pw" tokenauth="true";`}, "login module option tokenauth is not supported"},
		{"JAAS no semicolon", map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": strings.TrimSuffix(plainJAAS, ";")}, "missing the ';'"},
		{"JAAS bare option", map[string]string{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": `org.apache.kafka.common.security.plain.PlainLoginModule required secret-pw;`}, "an option without '='"},
		{"SASL key without SASL", map[string]string{"security.protocol": "SSL", "sasl.jaas.config": plainJAAS}, "sasl.jaas.config: security.protocol is SSL, which does not use SASL"},
		{"TLS key without TLS", map[string]string{"ssl.truststore.location": "/ca.pem"}, "security.protocol is PLAINTEXT, which does not use TLS"},
		{"JKS", map[string]string{"security.protocol": "SSL", "ssl.truststore.type": "JKS", "ssl.truststore.location": "/ts.jks"}, `ssl.truststore.type="JKS": not supported`},
		{"JKS default", map[string]string{"security.protocol": "SSL", "ssl.keystore.location": "/ks.jks"}, "ssl.keystore.location: needs ssl.keystore.type=PEM"},
		{"inline key without chain", map[string]string{"security.protocol": "SSL", "ssl.keystore.key": "x"}, "ssl.keystore.key and ssl.keystore.certificate.chain: give both"},
		{"hostname algorithm", map[string]string{"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"}, "want https or empty"},
		{"TLS 1.1", map[string]string{"security.protocol": "SSL", "ssl.enabled.protocols": "TLSv1.2,TLSv1.1"}, `"TLSv1.1" is not supported`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSecurity(c.conf, "consumer_config")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), "secret-pw") {
				t.Errorf("the error quotes the password: %v", err)
			}
		})
	}
}

// TestSecurityLoad reads PEM trust and key stores, from files and inline.
func TestSecurityLoad(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	client := ca.Issue(t, "client")
	keystore := testcerts.Write(t, dir, "client.pem", append(append([]byte{}, client.KeyPEM...), client.CertPEM...))
	trust := testcerts.Write(t, dir, "ca.pem", ca.PEM)
	s, err := ParseSecurity(map[string]string{"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": trust,
		"ssl.keystore.type": "PEM", "ssl.keystore.location": keystore}, "producer_config")
	if err != nil {
		t.Fatal(err)
	}
	sec, err := s.Load("transform W's producer config")
	if err != nil {
		t.Fatal(err)
	}
	if sec.TLS == nil || sec.TLS.RootCAs == nil || len(sec.TLS.Certificates) != 1 || sec.Protocol != kafkaconn.SSL {
		t.Errorf("loaded %+v", sec)
	}
	inline, err := ParseSecurity(map[string]string{"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": string(ca.PEM),
		"ssl.keystore.type": "PEM", "ssl.keystore.key": string(client.KeyPEM), "ssl.keystore.certificate.chain": string(client.CertPEM)}, "producer_config")
	if err != nil {
		t.Fatal(err)
	}
	if sec, err := inline.Load("x"); err != nil || len(sec.TLS.Certificates) != 1 {
		t.Errorf("inline stores: %v", err)
	}
	s.KeystoreLocation = trust // no key in it
	if _, err := s.Load("transform W's producer config"); err == nil || !strings.Contains(err.Error(), "transform W's producer config: ssl.keystore.location "+trust+": no PEM private key") {
		t.Errorf("a key store without a key: %v", err)
	}
}

// TestJobSecurity: a job connects as the runner does, or, when the runner
// has no security, as its Kafka reads and writes say (all the same); a
// transform that disagrees with the runner, or with another, fails the
// job naming them.
func TestJobSecurity(t *testing.T) {
	jaas := func(user string) string {
		return `org.apache.kafka.common.security.plain.PlainLoginModule required username="` + user + `" password="pw";`
	}
	conf := func(user string) map[string]string {
		return map[string]string{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas(user)}
	}
	plan := func(read, write map[string]string) *translate.Plan {
		return &translate.Plan{
			Pipeline: &pipepb.Pipeline{Components: &pipepb.Components{Transforms: map[string]*pipepb.PTransform{
				"r": {UniqueName: "ReadFromKafka"}, "w": {UniqueName: "WriteToKafka"}}}},
			SubTopologies: []*translate.SubTopology{{
				Root:  translate.Root{TransformID: "r", KafkaRead: &translate.KafkaRead{ConsumerConfig: read}},
				Sinks: []translate.Sink{{TransformID: "w", KafkaWrite: &translate.KafkaWrite{ProducerConfig: write}}},
			}},
		}
	}
	runner := &kafkaconn.Security{Protocol: kafkaconn.SASLPlaintext, Mechanism: "PLAIN", Username: "runner", Password: "x", Source: "the runner's options"}

	if s, err := JobSecurity(plan(nil, nil), runner); err != nil || s != runner {
		t.Errorf("no transform settings: %v, %v; want the runner's", s, err)
	}
	s, err := JobSecurity(plan(conf("alice"), nil), nil)
	if err != nil || s.Username != "alice" || s.Source != "transform ReadFromKafka's consumer config" {
		t.Errorf("a read's settings, no runner settings: %+v, %v", s, err)
	}
	if _, err := JobSecurity(plan(conf("alice"), conf("alice")), nil); err != nil {
		t.Errorf("the same settings twice: %v", err)
	}
	if _, err := JobSecurity(plan(conf("alice"), conf("bob")), nil); err == nil || !strings.Contains(err.Error(), "transform ReadFromKafka's consumer config and transform WriteToKafka's producer config give different security settings") {
		t.Errorf("different settings: %v", err)
	}
	if s, err := JobSecurity(plan(conf("runner"), nil), runner); err != nil || s != runner {
		t.Errorf("a transform agreeing with the runner: %v, %v", s, err)
	}
	if _, err := JobSecurity(plan(nil, conf("alice")), runner); err == nil || !strings.Contains(err.Error(), "transform WriteToKafka's producer config connects with SASL_PLAINTEXT, PLAIN as alice, but the runner connects to the job's brokers with SASL_PLAINTEXT, PLAIN as runner") {
		t.Errorf("a transform disagreeing with the runner: %v", err)
	}
	if _, err := JobSecurity(plan(map[string]string{"security.protocol": "SASL_SSL", "sasl.oauthbearer.token.endpoint.url": "x"}, nil), nil); err == nil || !strings.Contains(err.Error(), "transform ReadFromKafka: consumer config sasl.oauthbearer.token.endpoint.url is not supported") {
		t.Errorf("unsupported key at run: %v", err)
	}
}
