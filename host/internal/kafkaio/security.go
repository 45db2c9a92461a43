package kafkaio

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/translate"
)

// The security settings of a Kafka read's consumer config or a write's
// producer config, as Kafka's Java client names them. ksrunner honours
// those it can natively (SecurityKeys); any other key of the security.,
// sasl. or ssl. families, or a value it cannot honour, is an error naming
// it (at expansion, so the SDK reports it before the job is submitted).
//
//	security.protocol                    PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
//	sasl.mechanism                       PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
//	sasl.jaas.config                     PlainLoginModule or ScramLoginModule with username and password
//	ssl.truststore.type                  PEM (the only type; required with a location)
//	ssl.truststore.location              a PEM file of CA certificates
//	ssl.truststore.certificates          the same, inline
//	ssl.keystore.type                    PEM
//	ssl.keystore.location                a PEM file of the client's (unencrypted) private key and certificate chain
//	ssl.keystore.key                     the key, inline (with ssl.keystore.certificate.chain)
//	ssl.keystore.certificate.chain       the certificate chain, inline
//	ssl.endpoint.identification.algorithm  https (default) or empty (no host name check)
//	ssl.protocol, ssl.enabled.protocols  TLSv1.2, TLSv1.3 (TLS: either)
//
// Files are read when the job starts, on each machine that runs it.

// SecurityKeys are the keys honoured.
var SecurityKeys = []string{
	"security.protocol", "sasl.mechanism", "sasl.jaas.config",
	"ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates",
	"ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.key", "ssl.keystore.certificate.chain",
	"ssl.endpoint.identification.algorithm", "ssl.protocol", "ssl.enabled.protocols",
}

// IsSecurityKey reports whether key belongs to the security settings
// (honoured or refused here, never passed on as a client setting).
func IsSecurityKey(key string) bool {
	return strings.HasPrefix(key, "security.") || strings.HasPrefix(key, "sasl.") || strings.HasPrefix(key, "ssl.")
}

// The JAAS login modules of the SASL mechanisms.
const (
	plainLoginModule = "org.apache.kafka.common.security.plain.PlainLoginModule"
	scramLoginModule = "org.apache.kafka.common.security.scram.ScramLoginModule"
)

// Security is a read's or write's security settings, checked but not
// loaded (files are read by Load).
type Security struct {
	Protocol, Mechanism, Username, Password string
	TruststoreLocation, TruststorePEM       string
	KeystoreLocation                        string
	KeystoreKeyPEM, KeystoreChainPEM        string
	NoHostnameCheck                         bool
	MinTLS, MaxTLS                          uint16
}

// ParseSecurity checks the security settings of conf (a consumer or
// producer config); kind ("consumer config", "producer config") names it
// in errors. It returns nil when conf has none.
func ParseSecurity(conf map[string]string, kind string) (*Security, error) {
	var keys []string
	for k := range conf {
		if IsSecurityKey(k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(SecurityKeys, k) {
			return nil, fmt.Errorf("%s %s is not supported (ksrunner honours %s)", kind, k, strings.Join(SecurityKeys, ", "))
		}
	}
	get := func(k string) string { return strings.TrimSpace(conf[k]) }
	s := &Security{Protocol: strings.ToUpper(get("security.protocol"))}
	if s.Protocol == "" {
		s.Protocol = kafkaconn.Plaintext
	}
	bad := func(k, why string, args ...any) error {
		if k == "sasl.jaas.config" { // holds a password: not quoted
			return fmt.Errorf("%s %s: %s", kind, k, fmt.Sprintf(why, args...))
		}
		return fmt.Errorf("%s %s=%q: %s", kind, k, conf[k], fmt.Sprintf(why, args...))
	}
	if !slices.Contains(kafkaconn.Protocols, s.Protocol) {
		return nil, bad("security.protocol", "want one of %s", strings.Join(kafkaconn.Protocols, ", "))
	}
	sasl := s.Protocol == kafkaconn.SASLPlaintext || s.Protocol == kafkaconn.SASLSSL
	tlsOn := s.Protocol == kafkaconn.SSL || s.Protocol == kafkaconn.SASLSSL
	for _, k := range keys {
		switch {
		case strings.HasPrefix(k, "sasl.") && !sasl:
			return nil, bad(k, "security.protocol is %s, which does not use SASL (want SASL_PLAINTEXT or SASL_SSL)", s.Protocol)
		case strings.HasPrefix(k, "ssl.") && !tlsOn:
			return nil, bad(k, "security.protocol is %s, which does not use TLS (want SSL or SASL_SSL)", s.Protocol)
		}
	}
	if sasl {
		if _, ok := conf["sasl.mechanism"]; !ok {
			return nil, fmt.Errorf("%s sasl.mechanism: not set, and Kafka's default, GSSAPI (Kerberos), is not supported: set one of %s", kind, strings.Join(kafkaconn.Mechanisms, ", "))
		}
		s.Mechanism = strings.ToUpper(get("sasl.mechanism"))
		if !slices.Contains(kafkaconn.Mechanisms, s.Mechanism) {
			return nil, bad("sasl.mechanism", "not supported (want one of %s)", strings.Join(kafkaconn.Mechanisms, ", "))
		}
		jaas, ok := conf["sasl.jaas.config"]
		if !ok {
			return nil, fmt.Errorf("%s sasl.jaas.config: required with security.protocol %s (e.g. %s required username=\"...\" password=\"...\";)", kind, s.Protocol, loginModuleOf(s.Mechanism))
		}
		var err error
		if s.Username, s.Password, err = parseJAAS(jaas, s.Mechanism); err != nil {
			// The value holds a password: the error does not quote it.
			return nil, fmt.Errorf("%s sasl.jaas.config: %w", kind, err)
		}
	}
	if tlsOn {
		var err error
		if s.TruststoreLocation, s.TruststorePEM, err = pemStore(conf, kind, "truststore", "ssl.truststore.certificates", ""); err != nil {
			return nil, err
		}
		if s.KeystoreLocation, s.KeystoreKeyPEM, err = pemStore(conf, kind, "keystore", "ssl.keystore.key", "ssl.keystore.certificate.chain"); err != nil {
			return nil, err
		}
		s.KeystoreChainPEM = get("ssl.keystore.certificate.chain")
		if v, ok := conf["ssl.endpoint.identification.algorithm"]; ok {
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "https":
			case "":
				s.NoHostnameCheck = true
			default:
				return nil, bad("ssl.endpoint.identification.algorithm", "want https or empty (no host name check)")
			}
		}
		if s.MinTLS, s.MaxTLS, err = tlsVersions(conf, kind); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// pemStore checks a trust or key store: a PEM file (location, with type
// PEM) or inline PEM (inline, and for a key store also chain); it returns
// the location and the inline PEM.
func pemStore(conf map[string]string, kind, store, inline, chain string) (location, inlined string, err error) {
	typeKey, locKey := "ssl."+store+".type", "ssl."+store+".location"
	loc, hasLoc := conf[locKey]
	in, hasIn := conf[inline]
	typ, hasType := conf[typeKey]
	switch {
	case hasType && !strings.EqualFold(strings.TrimSpace(typ), "PEM"):
		return "", "", fmt.Errorf("%s %s=%q: not supported (ksrunner reads PEM stores only: set %s=PEM and give PEM files)", kind, typeKey, typ, typeKey)
	case hasLoc && hasIn:
		return "", "", fmt.Errorf("%s %s and %s: give one of them", kind, locKey, inline)
	case hasLoc && !hasType:
		return "", "", fmt.Errorf("%s %s: needs %s=PEM (Kafka's default type, JKS, is not supported: give a PEM file)", kind, locKey, typeKey)
	case hasLoc && strings.TrimSpace(loc) == "":
		return "", "", fmt.Errorf("%s %s: empty", kind, locKey)
	}
	if chain != "" {
		_, hasChain := conf[chain]
		if hasIn != hasChain {
			return "", "", fmt.Errorf("%s %s and %s: give both (the client's key and its certificate chain) or neither", kind, inline, chain)
		}
	}
	if hasIn {
		if blk, _ := pem.Decode([]byte(in)); blk == nil {
			return "", "", fmt.Errorf("%s %s: no PEM block in it", kind, inline)
		}
	}
	return strings.TrimSpace(loc), in, nil
}

// tlsVersions maps ssl.protocol and ssl.enabled.protocols to the TLS
// versions allowed.
func tlsVersions(conf map[string]string, kind string) (lo, hi uint16, err error) {
	versions := map[string]uint16{"TLSV1.2": tls.VersionTLS12, "TLSV1.3": tls.VersionTLS13}
	lo, hi = tls.VersionTLS12, tls.VersionTLS13
	if v, ok := conf["ssl.protocol"]; ok {
		// The protocol of Java's SSLContext; the versions a connection
		// may use are ssl.enabled.protocols (default: both).
		switch strings.ToUpper(strings.TrimSpace(v)) {
		case "TLS", "TLSV1.2", "TLSV1.3":
		default:
			return 0, 0, fmt.Errorf("%s ssl.protocol=%q: not supported (want TLS, TLSv1.2 or TLSv1.3)", kind, v)
		}
	}
	if v, ok := conf["ssl.enabled.protocols"]; ok {
		lo, hi = 0, 0
		for _, p := range strings.Split(v, ",") {
			n, ok := versions[strings.ToUpper(strings.TrimSpace(p))]
			if !ok {
				return 0, 0, fmt.Errorf("%s ssl.enabled.protocols=%q: %q is not supported (want TLSv1.2 and/or TLSv1.3)", kind, v, strings.TrimSpace(p))
			}
			if lo == 0 || n < lo {
				lo = n
			}
			hi = max(hi, n)
		}
	}
	return lo, hi, nil
}

func loginModuleOf(mechanism string) string {
	if mechanism == kafkaconn.MechanismPlain {
		return plainLoginModule
	}
	return scramLoginModule
}

// parseJAAS reads a one-module JAAS configuration as Kafka's
// sasl.jaas.config holds it: `CLASS FLAG name="value" ...;`. The class must
// be the login module of mechanism; username and password are required and
// the only options honoured.
func parseJAAS(config, mechanism string) (user, pass string, err error) {
	toks, err := jaasTokens(config)
	if err != nil {
		return "", "", err
	}
	if len(toks) < 2 {
		return "", "", fmt.Errorf("want %s required username=\"...\" password=\"...\";", loginModuleOf(mechanism))
	}
	if want := loginModuleOf(mechanism); toks[0] != want {
		return "", "", fmt.Errorf("login module %s does not go with sasl.mechanism %s (want %s)", toks[0], mechanism, want)
	}
	switch strings.ToLower(toks[1]) {
	case "required", "requisite", "sufficient", "optional":
	default:
		return "", "", fmt.Errorf("control flag %q: want required", toks[1])
	}
	opts := map[string]string{}
	for _, t := range toks[2:] {
		name, value, ok := strings.Cut(t, "=")
		if !ok { // not quoted: it may be a password
			return "", "", errors.New("an option without '=' (want name=\"value\")")
		}
		opts[name] = value
	}
	for name := range opts {
		if name != "username" && name != "password" {
			return "", "", fmt.Errorf("login module option %s is not supported (only username and password)", name)
		}
	}
	if opts["username"] == "" || opts["password"] == "" {
		return "", "", errors.New("username and password are required")
	}
	return opts["username"], opts["password"], nil
}

// jaasTokens splits a JAAS entry into its class, flag and name=value
// options (quoted values unquoted, \" and \\ unescaped); it ends at ";".
func jaasTokens(s string) ([]string, error) {
	var toks []string
	var cur strings.Builder
	inTok, ended := false, false
	flush := func() {
		if inTok {
			toks = append(toks, cur.String())
			cur.Reset()
			inTok = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case ended:
			if !unicode.IsSpace(rune(c)) {
				return nil, errors.New("more than one login module (text after ';')")
			}
		case c == ';':
			flush()
			ended = true
		case unicode.IsSpace(rune(c)):
			flush()
		case c == '"':
			inTok = true
			closed := false
			for i++; i < len(s); i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
					cur.WriteByte(s[i])
					continue
				}
				if s[i] == '"' {
					closed = true
					break
				}
				cur.WriteByte(s[i])
			}
			if !closed {
				return nil, errors.New("unterminated quoted value")
			}
		default:
			inTok = true
			cur.WriteByte(c)
		}
	}
	flush()
	if !ended {
		return nil, errors.New("missing the ';' that ends the login module")
	}
	return toks, nil
}

// Load reads the files and builds the connection settings; source names
// the settings in messages ("transform X's consumer config").
func (s *Security) Load(source string) (*kafkaconn.Security, error) {
	out := &kafkaconn.Security{Protocol: s.Protocol, Mechanism: s.Mechanism, Username: s.Username, Password: s.Password, Source: source}
	if s.Protocol != kafkaconn.SSL && s.Protocol != kafkaconn.SASLSSL {
		return out, out.Validate()
	}
	cfg := &tls.Config{MinVersion: s.MinTLS, MaxVersion: s.MaxTLS}
	trust := []byte(s.TruststorePEM)
	if s.TruststoreLocation != "" {
		b, err := os.ReadFile(s.TruststoreLocation)
		if err != nil {
			return nil, fmt.Errorf("%s: ssl.truststore.location: %w", source, err)
		}
		trust = b
	}
	if len(trust) > 0 {
		pool, err := kafkaconn.CertPool(trust)
		if err != nil {
			return nil, fmt.Errorf("%s: ssl.truststore: %w", source, err)
		}
		cfg.RootCAs = pool
	}
	keyPEM, chainPEM := []byte(s.KeystoreKeyPEM), []byte(s.KeystoreChainPEM)
	if s.KeystoreLocation != "" {
		b, err := os.ReadFile(s.KeystoreLocation)
		if err != nil {
			return nil, fmt.Errorf("%s: ssl.keystore.location: %w", source, err)
		}
		if keyPEM, chainPEM, err = splitKeystore(b); err != nil {
			return nil, fmt.Errorf("%s: ssl.keystore.location %s: %w", source, s.KeystoreLocation, err)
		}
	}
	if len(keyPEM) > 0 {
		if blk, _ := pem.Decode(keyPEM); blk != nil && blk.Type == "ENCRYPTED PRIVATE KEY" {
			return nil, fmt.Errorf("%s: ssl.keystore: an encrypted private key is not supported (ssl.key.password): give it unencrypted, in a file only the runner can read", source)
		}
		cert, err := tls.X509KeyPair(chainPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%s: ssl.keystore: %w", source, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if s.NoHostnameCheck {
		// Verify the chain, not the host name (Java's empty
		// ssl.endpoint.identification.algorithm).
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the broker sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	out.TLS = cfg
	return out, out.Validate()
}

// splitKeystore splits a PEM key store (Kafka's ssl.keystore.type=PEM
// file) into its private key and its certificates.
func splitKeystore(b []byte) (key, chain []byte, err error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		switch {
		case blk.Type == "CERTIFICATE":
			chain = append(chain, pem.EncodeToMemory(blk)...)
		case strings.HasSuffix(blk.Type, "PRIVATE KEY"):
			if key != nil {
				return nil, nil, errors.New("more than one private key")
			}
			key = pem.EncodeToMemory(blk)
		}
	}
	switch {
	case key == nil:
		return nil, nil, errors.New("no PEM private key in it")
	case chain == nil:
		return nil, nil, errors.New("no PEM certificate in it")
	}
	return key, chain, nil
}

// JobSecurity is how a job's clients connect: the runner's own settings
// (runner; nil: PLAINTEXT) or, when the runner has none, the settings the
// job's Kafka reads and writes give, which must then all be the same. A
// job has one client for its reads, writes and internal topics, so when
// the runner has settings of its own, a transform's must agree with them
// on the protocol, mechanism and user.
func JobSecurity(plan *translate.Plan, runner *kafkaconn.Security) (*kafkaconn.Security, error) {
	type given struct {
		transform, kind string
		conf            map[string]string
	}
	var all []given
	for _, st := range plan.SubTopologies {
		if r := st.Root.KafkaRead; r != nil {
			all = append(all, given{st.Root.TransformID, "consumer config", r.ConsumerConfig})
		}
		for _, sk := range st.Sinks {
			if w := sk.KafkaWrite; w != nil {
				all = append(all, given{sk.TransformID, "producer config", w.ProducerConfig})
			}
		}
	}
	names := plan.Pipeline.GetComponents().GetTransforms()
	var first *Security
	var firstFrom string
	for _, g := range all {
		name := g.transform
		if t := names[g.transform]; t != nil && t.GetUniqueName() != "" {
			name = t.GetUniqueName()
		}
		from := fmt.Sprintf("transform %s's %s", name, g.kind)
		s, err := ParseSecurity(g.conf, "transform "+name+": "+g.kind)
		if err != nil || s == nil {
			if err != nil {
				return nil, err
			}
			continue
		}
		if runner != nil && runner.Protocol != kafkaconn.Plaintext {
			if s.Protocol != runner.Protocol || s.Mechanism != runner.Mechanism || s.Username != runner.Username {
				return nil, fmt.Errorf("%s connects with %s, but the runner connects to the job's brokers with %s: a job has one Kafka client for its reads, writes and internal topics, so they must agree (drop the security settings from the pipeline, or give the runner the same)",
					from, (&kafkaconn.Security{Protocol: s.Protocol, Mechanism: s.Mechanism, Username: s.Username}).Describe(), runner.Describe())
			}
			continue
		}
		if first == nil {
			first, firstFrom = s, from
			continue
		}
		if *s != *first {
			return nil, fmt.Errorf("%s and %s give different security settings: a job has one Kafka client for all its reads and writes, so they must be the same", firstFrom, from)
		}
	}
	if first == nil {
		return runner, nil
	}
	return first.Load(firstFrom)
}
