package endpoint

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// ProxyOptions are how a Proxy connects to the guarded endpoint.
type ProxyOptions struct {
	// CAFile verifies the endpoint's certificate (default: the system's
	// roots); ServerName is the name to verify it for (default: the
	// endpoint's host).
	CAFile, ServerName string
	// CertFile and KeyFile are a client certificate, for an endpoint that
	// requires one (tls_client_ca_file).
	CertFile, KeyFile string
	// TokenFile holds the bearer token to send with every call.
	TokenFile string
	// Plaintext connects without TLS (an endpoint with insecure_bind).
	Plaintext bool
}

// dialOptions are the dial options of the connection to the endpoint: TLS
// (or plaintext) and the token.
func (f ProxyOptions) dialOptions() ([]grpc.DialOption, error) {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("options tls_cert_file and tls_key_file: give both or neither")
	}
	var opts []grpc.DialOption
	if f.Plaintext {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
		if f.CAFile != "" {
			b, err := os.ReadFile(f.CAFile)
			if err != nil {
				return nil, fmt.Errorf("option tls_ca_file: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(b) {
				return nil, fmt.Errorf("option tls_ca_file: %s holds no PEM certificate", f.CAFile)
			}
		}
		if f.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("options tls_cert_file and tls_key_file: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	if f.TokenFile != "" {
		tok, err := ReadToken(f.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("option auth_token_file: %w", err)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: tok, tls: !f.Plaintext}))
	}
	return opts, nil
}

// bearer sends "authorization: Bearer TOKEN" with every call.
type bearer struct {
	token string
	tls   bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.tls }

// Proxy forwards every gRPC call (any service, unary or streaming) it
// receives on a loopback address to a guarded endpoint, over TLS with the
// bearer token: it lets a client that speaks neither (Beam's Python SDK,
// the Go SDK's expansion client) use a guarded job or expansion endpoint.
// The answer to the Job API's Prepare names the proxy as the artifact
// staging endpoint, so that staging goes through it too.
type Proxy struct {
	addr   string // the local address clients dial
	lis    net.Listener
	srv    *grpc.Server
	remote *grpc.ClientConn
	logger *slog.Logger
}

// prepareMethod is the Job API call whose answer names the artifact
// staging endpoint: the proxy puts its own address there, so that the
// client stages through it too.
const prepareMethod = "/org.apache.beam.model.job_management.v1.JobService/Prepare"

// NewProxy listens on local (a loopback HOST:PORT; port 0 picks one) and
// forwards to remote (HOST:PORT) per opts. Serve serves.
func NewProxy(local, remote string, opts ProxyOptions, logger *slog.Logger) (*Proxy, error) {
	creds, err := opts.dialOptions()
	if err != nil {
		return nil, err
	}
	// Loopback only: the proxy itself admits anyone who reaches it.
	lis, _, err := Listen("proxy", local, Security{}, logger)
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(remote, append(creds, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(512<<20), grpc.MaxCallSendMsgSize(512<<20)))...)
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("proxy to %s: %w", remote, err)
	}
	p := &Proxy{addr: lis.Addr().String(), lis: lis, remote: cc, logger: logger}
	p.srv = grpc.NewServer(grpc.UnknownServiceHandler(p.forward), grpc.ForceServerCodec(rawCodec{}),
		grpc.MaxRecvMsgSize(512<<20), grpc.MaxSendMsgSize(512<<20))
	return p, nil
}

// Addr is the loopback address clients dial.
func (p *Proxy) Addr() string { return p.addr }

// Serve serves until Stop; it returns nil after Stop.
func (p *Proxy) Serve() error {
	if err := p.srv.Serve(p.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Stop stops the proxy, ending open calls.
func (p *Proxy) Stop() {
	p.srv.Stop()
	p.remote.Close()
}

// forward relays one call, of any method, both ways.
func (p *Proxy) forward(_ any, in grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(in)
	if !ok {
		return status.Error(codes.Internal, "proxy: no method")
	}
	ctx, cancel := context.WithCancel(in.Context())
	defer cancel()
	md, _ := metadata.FromIncomingContext(ctx)
	fwd := metadata.MD{}
	for k, v := range md {
		switch {
		case strings.HasPrefix(k, ":"), strings.HasPrefix(k, "grpc-"), k == "content-type", k == "user-agent", k == "te", k == "authorization":
		default:
			fwd[k] = v
		}
	}
	out, err := p.remote.NewStream(metadata.NewOutgoingContext(ctx, fwd), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	// client -> endpoint
	sendErr := make(chan error, 1)
	go func() {
		for {
			var m frame
			if err := in.RecvMsg(&m); err != nil {
				if errors.Is(err, io.EOF) {
					sendErr <- out.CloseSend()
				} else {
					cancel()
					sendErr <- err
				}
				return
			}
			if err := out.SendMsg(&m); err != nil {
				// the endpoint ended the call: its status comes with RecvMsg
				sendErr <- nil
				return
			}
		}
	}()
	// endpoint -> client
	if hdr, err := out.Header(); err == nil && len(hdr) > 0 {
		if err := in.SendHeader(hdr); err != nil {
			return err
		}
	}
	for {
		var m frame
		if err := out.RecvMsg(&m); err != nil {
			in.SetTrailer(out.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err // the endpoint's status, as it is
		}
		if method == prepareMethod {
			if b, err := p.rewritePrepare(m.b); err == nil {
				m.b = b
			}
		}
		if err := in.SendMsg(&m); err != nil {
			return err
		}
	}
}

// rewritePrepare points a PrepareJobResponse's artifact staging endpoint
// at the proxy.
func (p *Proxy) rewritePrepare(b []byte) ([]byte, error) {
	var resp jobpb.PrepareJobResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		return nil, err
	}
	resp.ArtifactStagingEndpoint = &pipepb.ApiServiceDescriptor{Url: p.addr}
	return proto.Marshal(&resp)
}

// frame is one message, as its bytes.
type frame struct{ b []byte }

// rawCodec passes messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, fmt.Errorf("proxy codec: %T is not a frame", v)
	}
	return f.b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return fmt.Errorf("proxy codec: %T is not a frame", v)
	}
	f.b = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }
