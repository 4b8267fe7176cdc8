package slurm

import (
	"crypto/rsa"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TokenSource mints slurmrestd JWTs for one Slurm user and renews them before they expire,
// so no long-lived token is ever stored: HS256 with the auth/jwt key file (read again at
// each renewal, which makes key rotation a file update), or RS256 with an RSA key whose
// public half slurmctld has in a JWKS file (AuthAltParameters=jwks=...), named by KeyID.
type TokenSource struct {
	KeyFile  string
	RSAKey   *rsa.PrivateKey
	KeyID    string
	User     string
	Lifetime time.Duration

	mu      sync.Mutex
	token   string
	renewAt time.Time
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
	if t.token != "" && now.Before(t.renewAt) {
		return t.token, nil
	}
	// Claims as `scontrol token` writes them: sun is the Slurm user name.
	claims := jwt.MapClaims{"iat": now.Unix(), "exp": now.Add(t.Lifetime).Unix(), "sun": t.User}
	var signed string
	var err error
	if t.RSAKey != nil {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
		tok.Header["kid"] = t.KeyID
		signed, err = tok.SignedString(t.RSAKey)
	} else {
		var key []byte
		if key, err = os.ReadFile(t.KeyFile); err != nil {
			return "", fmt.Errorf("reading Slurm JWT key: %w", err)
		}
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
	return t.next.RoundTrip(req)
}
