// Package kafkaconn builds the connection options of every Kafka client the
// runner creates: the seed brokers and, on a secured cluster, TLS and SASL.
// Opts is the one function that does it; the runtime, the internal topics,
// the pipeline topic and the Kafka reads and writes all start from it.
//
// Security comes from the runner's own options (Config: security_protocol,
// sasl_mechanism, sasl_username, sasl_password_file, ssl_ca_file,
// ssl_cert_file, ssl_key_file) or from a pipeline's Kafka consumer and
// producer config (host/internal/kafkaio: security.protocol, sasl.mechanism,
// sasl.jaas.config, ssl.truststore.*, ssl.keystore.*).
package kafkaconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Security protocols (Kafka's security.protocol values).
const (
	Plaintext     = "PLAINTEXT"
	SSL           = "SSL"
	SASLPlaintext = "SASL_PLAINTEXT"
	SASLSSL       = "SASL_SSL"
)

// SASL mechanisms (Kafka's sasl.mechanism values) the runner speaks.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

// Protocols and Mechanisms list the values accepted, for messages.
var (
	Protocols  = []string{Plaintext, SSL, SASLPlaintext, SASLSSL}
	Mechanisms = []string{MechanismPlain, MechanismScramSHA256, MechanismScramSHA512}
)

// Security is how a client connects: over TLS or not, authenticated with
// SASL or not. A nil *Security is PLAINTEXT.
type Security struct {
	// Protocol is one of Protocols.
	Protocol string
	// Mechanism, Username and Password authenticate a SASL_* connection.
	Mechanism          string
	Username, Password string
	// TLS configures an SSL or SASL_SSL connection: its roots (nil: the
	// system's) and client certificate (none: no client authentication).
	TLS *tls.Config
	// Source says where these settings came from, for messages: "the
	// runner's options" or "transform X's consumer config".
	Source string
}

// usesTLS reports whether the protocol runs over TLS.
func usesTLS(protocol string) bool { return protocol == SSL || protocol == SASLSSL }

// usesSASL reports whether the protocol authenticates with SASL.
func usesSASL(protocol string) bool { return protocol == SASLPlaintext || protocol == SASLSSL }

// Opts are the options every client of brokers (a comma-separated list)
// starts with: the seed brokers, then TLS and SASL per s (nil: PLAINTEXT),
// then extra.
func Opts(brokers string, s *Security, extra ...kgo.Opt) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(SplitBrokers(brokers)...)}
	if s != nil {
		if usesTLS(s.Protocol) {
			cfg := s.TLS
			if cfg == nil {
				cfg = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			opts = append(opts, kgo.DialTLSConfig(cfg.Clone()))
		}
		if m := s.mechanism(); m != nil {
			opts = append(opts, kgo.SASL(m))
		}
	}
	return append(opts, extra...)
}

// NewClient is kgo.NewClient(Opts(brokers, s, extra...)...).
func NewClient(brokers string, s *Security, extra ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(Opts(brokers, s, extra...)...)
}

// SplitBrokers splits a comma-separated broker list, dropping blanks.
func SplitBrokers(brokers string) []string {
	var out []string
	for _, b := range strings.Split(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

func (s *Security) mechanism() sasl.Mechanism {
	if s == nil || !usesSASL(s.Protocol) {
		return nil
	}
	switch s.Mechanism {
	case MechanismPlain:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()
	case MechanismScramSHA256:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()
	case MechanismScramSHA512:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()
	}
	return nil // Validate refuses it
}

// Validate checks the settings' combination; what names the settings in
// messages (e.g. "option security_protocol").
func (s *Security) Validate() error {
	if s == nil {
		return nil
	}
	switch s.Protocol {
	case Plaintext, SSL, SASLPlaintext, SASLSSL:
	default:
		return fmt.Errorf("security protocol %q: want one of %s", s.Protocol, strings.Join(Protocols, ", "))
	}
	if usesSASL(s.Protocol) {
		switch s.Mechanism {
		case MechanismPlain, MechanismScramSHA256, MechanismScramSHA512:
		default:
			return fmt.Errorf("SASL mechanism %q: want one of %s", s.Mechanism, strings.Join(Mechanisms, ", "))
		}
		if s.Username == "" || s.Password == "" {
			return fmt.Errorf("%s with %s needs a username and a password", s.Protocol, s.Mechanism)
		}
	}
	return nil
}

// Describe is a short description of the settings for messages, without
// the password: "SASL_SSL, SCRAM-SHA-256 as alice (the runner's options)".
func (s *Security) Describe() string {
	if s == nil || s.Protocol == "" || s.Protocol == Plaintext {
		src := ""
		if s != nil && s.Source != "" {
			src = " (" + s.Source + ")"
		}
		return Plaintext + src
	}
	d := s.Protocol
	if usesSASL(s.Protocol) {
		d += fmt.Sprintf(", %s as %s", s.Mechanism, s.Username)
	}
	if s.TLS != nil && len(s.TLS.Certificates) > 0 {
		d += ", with a client certificate"
	}
	if s.Source != "" {
		d += " (" + s.Source + ")"
	}
	return d
}

// Equal reports whether two settings connect the same way (their sources
// aside).
func (s *Security) Equal(o *Security) bool {
	if s == nil || o == nil {
		return (s == nil || s.Protocol == Plaintext) && (o == nil || o.Protocol == Plaintext)
	}
	return s.Protocol == o.Protocol && s.Mechanism == o.Mechanism && s.Username == o.Username && s.Password == o.Password
}

// Config is the runner's own Kafka security options, with secrets and
// certificates in files (Load reads them).
type Config struct {
	// Protocol: PLAINTEXT (""), SSL, SASL_PLAINTEXT or SASL_SSL.
	Protocol string `koanf:"security_protocol" json:"security_protocol,omitempty"`
	// Mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_* only).
	Mechanism string `koanf:"sasl_mechanism" json:"sasl_mechanism,omitempty"`
	// Username and PasswordFile authenticate with SASL; the file holds
	// the password (a trailing newline is dropped).
	Username     string `koanf:"sasl_username" json:"sasl_username,omitempty"`
	PasswordFile string `koanf:"sasl_password_file" json:"sasl_password_file,omitempty"`
	// CAFile is a PEM file of the certificates that verify the brokers'
	// (default: the system's roots). CertFile and KeyFile are the PEM
	// client certificate (chain) and its key, for brokers that
	// authenticate clients by certificate (ssl.client.auth=required).
	CAFile   string `koanf:"ssl_ca_file" json:"ssl_ca_file,omitempty"`
	CertFile string `koanf:"ssl_cert_file" json:"ssl_cert_file,omitempty"`
	KeyFile  string `koanf:"ssl_key_file" json:"ssl_key_file,omitempty"`
}

// Empty reports whether nothing is set (PLAINTEXT).
func (c Config) Empty() bool { return c == Config{} }

// Check validates the options without reading the files, naming the
// option at fault.
func (c Config) Check() error {
	p := strings.ToUpper(strings.TrimSpace(c.Protocol))
	if p == "" {
		p = Plaintext
	}
	switch p {
	case Plaintext, SSL, SASLPlaintext, SASLSSL:
	default:
		return fmt.Errorf("option security_protocol: %q, want one of %s", c.Protocol, strings.Join(Protocols, ", "))
	}
	if usesSASL(p) {
		switch strings.ToUpper(strings.TrimSpace(c.Mechanism)) {
		case MechanismPlain, MechanismScramSHA256, MechanismScramSHA512:
		case "":
			return fmt.Errorf("option sasl_mechanism: required with security_protocol %s (want one of %s)", p, strings.Join(Mechanisms, ", "))
		default:
			return fmt.Errorf("option sasl_mechanism: %q, want one of %s", c.Mechanism, strings.Join(Mechanisms, ", "))
		}
		if c.Username == "" {
			return fmt.Errorf("option sasl_username: required with security_protocol %s", p)
		}
		if c.PasswordFile == "" {
			return fmt.Errorf("option sasl_password_file: required with security_protocol %s (a file holding the password)", p)
		}
	} else {
		for _, o := range []struct{ name, v string }{{"sasl_mechanism", c.Mechanism}, {"sasl_username", c.Username}, {"sasl_password_file", c.PasswordFile}} {
			if o.v != "" {
				return fmt.Errorf("option %s: set, but security_protocol %s does not use SASL (want SASL_PLAINTEXT or SASL_SSL)", o.name, p)
			}
		}
	}
	if !usesTLS(p) {
		for _, o := range []struct{ name, v string }{{"ssl_ca_file", c.CAFile}, {"ssl_cert_file", c.CertFile}, {"ssl_key_file", c.KeyFile}} {
			if o.v != "" {
				return fmt.Errorf("option %s: set, but security_protocol %s does not use TLS (want SSL or SASL_SSL)", o.name, p)
			}
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("options ssl_cert_file and ssl_key_file: give both (the client certificate and its key) or neither")
	}
	return nil
}

// ClientOpts are Opts(brokers, ...) with the security c loads, then extra:
// for clients outside the runtime (the command line's broker check).
func (c Config) ClientOpts(brokers string, extra ...kgo.Opt) ([]kgo.Opt, error) {
	s, err := c.Load()
	if err != nil {
		return nil, err
	}
	return Opts(brokers, s, extra...), nil
}

// Load checks the options and reads their files: nil for PLAINTEXT.
func (c Config) Load() (*Security, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	s := &Security{Protocol: strings.ToUpper(strings.TrimSpace(c.Protocol)), Source: "the runner's options"}
	if s.Protocol == "" {
		s.Protocol = Plaintext
	}
	if s.Protocol == Plaintext {
		return nil, nil
	}
	if usesSASL(s.Protocol) {
		s.Mechanism = strings.ToUpper(strings.TrimSpace(c.Mechanism))
		s.Username = c.Username
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("option sasl_password_file: %w", err)
		}
		if s.Password = strings.TrimRight(string(b), "\r\n"); s.Password == "" {
			return nil, fmt.Errorf("option sasl_password_file: %s is empty", c.PasswordFile)
		}
	}
	if usesTLS(s.Protocol) {
		s.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			if err != nil {
				return nil, fmt.Errorf("option ssl_ca_file: %w", err)
			}
			if s.TLS.RootCAs, err = CertPool(pem); err != nil {
				return nil, fmt.Errorf("option ssl_ca_file: %s: %w", c.CAFile, err)
			}
		}
		if c.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("options ssl_cert_file and ssl_key_file (%s, %s): %w", c.CertFile, c.KeyFile, err)
			}
			s.TLS.Certificates = []tls.Certificate{cert}
		}
	}
	return s, s.Validate()
}

// CertPool is a pool of the PEM certificates in pem, which must hold one.
func CertPool(pem []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}

// AuthError is a Kafka error of authentication (TLS or SASL) or
// authorization, with the brokers and the security it connected with.
type AuthError struct {
	Brokers  string
	Security string // Describe
	Err      error
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("Kafka authentication with broker %s failed (%s): %v", e.Brokers, e.Security, e.Err)
}

func (e *AuthError) Unwrap() error { return e.Err }

// Explain wraps an authentication or authorization error of a client of
// brokers in an AuthError naming them and s; other errors (and those
// explained already) are returned as they are.
func Explain(err error, brokers string, s *Security) error {
	if err == nil || !IsAuthError(err) {
		return err
	}
	if _, ok := errors.AsType[*AuthError](err); ok {
		return err
	}
	return &AuthError{Brokers: strings.Join(SplitBrokers(brokers), ","), Security: s.Describe(), Err: err}
}

// IsAuthError reports whether err comes from TLS or SASL failing, or the
// broker refusing an authenticated principal.
func IsAuthError(err error) bool {
	for _, k := range []error{
		kerr.SaslAuthenticationFailed, kerr.IllegalSaslState, kerr.UnsupportedSaslMechanism,
		kerr.ClusterAuthorizationFailed, kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed,
		kerr.TransactionalIDAuthorizationFailed,
	} {
		if errors.Is(err, k) {
			return true
		}
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*kgo.ErrFirstReadEOF](err); ok {
		return true // the broker hung up at once: TLS or SASL expected, or refused
	}
	// A TLS alert from the server arrives as a *net.OpError wrapping an
	// unexported alert type ("remote error: tls: ...").
	return strings.Contains(err.Error(), "remote error: tls:")
}
