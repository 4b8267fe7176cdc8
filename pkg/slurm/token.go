package slurm

import (
	"crypto/rsa"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/kubeslurm/kubeslurm/pkg/metrics"
)

// TokenSource mints slurmrestd JWTs for one Slurm user and renews them before they expire,
// so no long-lived token is ever stored: HS256 with the auth/jwt key file, or RS256 with an
// RSA key whose public half slurmctld has in a JWKS file (AuthAltParameters=jwks=...),
// named by KeyID. The key file is read again at each renewal and as soon as it is another
// file (a mounted Secret's update replaces it), so a key rotated in place is used from the
// next request on, not after half a token's lifetime of refused calls.
type TokenSource struct {
	KeyFile  string
	RSAKey   *rsa.PrivateKey
	KeyID    string
	User     string
	Lifetime time.Duration

	mu      sync.Mutex
	token   string
	renewAt time.Time
	keyFile os.FileInfo // the key file the token was signed from
	now     func() time.Time
}

// NewTokenSource returns a TokenSource minting tokens valid for lifetime.
func NewTokenSource(keyFile, user string, lifetime time.Duration) *TokenSource {
	return &TokenSource{KeyFile: keyFile, User: user, Lifetime: lifetime, now: time.Now}
}

// Token returns a valid token, minting a new one when half its lifetime has passed.
func (t *TokenSource) Token() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.token != "" && now.Before(t.renewAt) && !t.keyFileReplaced() {
		return t.token, nil
	}
	claims := tokenClaims(t.User, now, t.Lifetime)
	var signed string
	var err error
	if t.RSAKey != nil {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
		tok.Header["kid"] = t.KeyID
		signed, err = tok.SignedString(t.RSAKey)
	} else {
		var key []byte
		info, _ := os.Stat(t.KeyFile) // before the read: a change in between renews again
		if key, err = os.ReadFile(t.KeyFile); err != nil {
			return "", fmt.Errorf("reading Slurm JWT key: %w", err)
		}
		t.keyFile = info
		if len(key) == 0 {
			return "", fmt.Errorf("slurm JWT key %s is empty", t.KeyFile)
		}
		signed, err = jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
	}
	if err != nil {
		return "", fmt.Errorf("signing Slurm JWT: %w", err)
	}
	t.token, t.renewAt = signed, now.Add(t.Lifetime/2)
	return signed, nil
}

// tokenClaims are the claims `scontrol token` writes: sun is the Slurm user name.
func tokenClaims(user string, now time.Time, lifetime time.Duration) jwt.MapClaims {
	return jwt.MapClaims{"iat": now.Unix(), "exp": now.Add(lifetime).Unix(), "sun": user}
}

// MintHS256 returns one token for user, valid for lifetime from now, signed with an
// auth/jwt HS256 key: what a TokenSource with that key file mints.
func MintHS256(key []byte, user string, lifetime time.Duration) (string, error) {
	if len(key) == 0 {
		return "", fmt.Errorf("slurm JWT key is empty")
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, tokenClaims(user, time.Now(), lifetime)).SignedString(key)
	if err != nil {
		return "", fmt.Errorf("signing Slurm JWT: %w", err)
	}
	return signed, nil
}

// keyFileReplaced tells whether the HS256 key file is now another file, or was written to,
// since the current token was signed. A file that cannot be read now keeps the token (it
// may be between a Secret update's steps; the renewal reports the error).
func (t *TokenSource) keyFileReplaced() bool {
	if t.RSAKey != nil || t.keyFile == nil {
		return false
	}
	now, err := os.Stat(t.KeyFile)
	return err == nil && (!os.SameFile(now, t.keyFile) || !now.ModTime().Equal(t.keyFile.ModTime()) || now.Size() != t.keyFile.Size())
}

// tokenTransport sets the current token on every request, so renewals need no new client.
type tokenTransport struct {
	source *TokenSource
	next   http.RoundTripper
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	token, err := t.source.Token()
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Header.Set("X-SLURM-USER-TOKEN", token)
	req.Header.Set("X-SLURM-USER-NAME", t.source.User)
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.Body != nil {
		resp.Body = &countedBody{ReadCloser: resp.Body}
	}
	return resp, err
}

// countedBody counts what is read of an answer in metrics.SlurmResponseBytes.
type countedBody struct{ io.ReadCloser }

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	metrics.SlurmResponseBytes.Add(float64(n))
	return n, err
}
