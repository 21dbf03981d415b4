package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"strata/icetable"
	"strata/icetable/restcat"
	"strata/tiering/objstore/local"
)

// icebergCatalog is strata's REST catalog over an empty local bucket.
func icebergCatalog(t *testing.T) http.Handler {
	dir := t.TempDir()
	b, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return (&restcat.Server{Tables: &icetable.Tables{Bucket: b, Prefix: "data", Location: dir},
		Topics: func(context.Context) ([]string, error) { return nil, nil }}).Handler()
}

// The catalog issues no OAuth tokens: it takes the admin token as it is.
// A client's token request (the REST spec's /v1/oauth/tokens, which
// credential= makes pyiceberg and Spark send) is answered in OAuth 2's
// error model (RFC 6749 section 5.2), saying to give the admin token as
// token=, whatever guard the admin API has; not the admin API's 401.
func TestOAuthTokenRequestsAreToldToUseTheToken(t *testing.T) {
	e, cat := engine(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		want int
		say  string
	}{
		{"no token", Config{}, http.StatusUnauthorized, "token="},
		{"admin token", Config{Token: "s3cret"}, http.StatusUnauthorized, "token="},
		{"SASL on, no token", Config{Authenticated: true}, http.StatusUnauthorized, "admin_token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Store, tc.cfg.Engine, tc.cfg.Catalog, tc.cfg.Iceberg = e, e, cat, icebergCatalog(t)
			form := url.Values{"grant_type": {"client_credentials"}, "client_id": {"alice"}, "client_secret": {"pw"}, "scope": {"catalog"}}
			req := httptest.NewRequest("POST", "/iceberg/v1/oauth/tokens", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			rec := httptest.NewRecorder()
			Handler(context.Background(), tc.cfg).ServeHTTP(rec, req)
			var body struct {
				Error       string `json:"error"`
				Description string `json:"error_description"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != tc.want || body.Error != "invalid_client" ||
				!strings.Contains(body.Description, tc.say) || rec.Header().Get("Content-Type") != "application/json" ||
				rec.Header().Get("Cache-Control") != "no-store" {
				t.Fatalf("POST /iceberg/v1/oauth/tokens: %d %q (%v, %v); want %d, OAuth's invalid_client saying %q, no-store",
					rec.Code, rec.Body, rec.Header(), err, tc.want, tc.say)
			}
		})
	}
}

// pyiceberg's credential= fails at load_catalog with the catalog's own
// words (OAuthError: invalid_client: ... token=...); token= works.
func TestPyIcebergCredentialIsToldToUseTheToken(t *testing.T) {
	root, _ := filepath.Abs("../..")
	out, err := exec.Command(filepath.Join(root, "scripts", "pyenv"), "iceberg").Output()
	if err != nil {
		t.Fatalf("scripts/pyenv iceberg: %v", err)
	}
	py := strings.TrimSpace(string(out))
	e, cat := engine(t)
	srv := httptest.NewServer(Handler(context.Background(), Config{Store: e, Engine: e, Catalog: cat, Token: "s3cret", Iceberg: icebergCatalog(t)}))
	defer srv.Close()
	const script = `
import sys
from pyiceberg.catalog import load_catalog
uri = sys.argv[1] + "/iceberg"
try:
    load_catalog("strata", type="rest", uri=uri, credential="alice:pw").list_namespaces()
    print("CREDENTIAL-OK")
except Exception as e:
    print("CREDENTIAL-ERR", type(e).__name__, e)
print("TOKEN", load_catalog("strata", type="rest", uri=uri, token="s3cret").list_namespaces())
`
	got, err := exec.Command(py, "-c", script, srv.URL).CombinedOutput()
	if err != nil {
		t.Fatalf("pyiceberg: %v\n%s", err, got)
	}
	t.Logf("pyiceberg:\n%s", got)
	s := string(got)
	if !strings.Contains(s, "CREDENTIAL-ERR OAuthError invalid_client: ") || !strings.Contains(s, "token=") {
		t.Fatalf("pyiceberg with credential=: want an OAuthError saying invalid_client and to use token=; got\n%s", s)
	}
	if !strings.Contains(s, "TOKEN [('strata',)]") {
		t.Fatalf("pyiceberg with token=: want the namespace; got\n%s", s)
	}
}
