package httpserver

import (
	"net/http"
	"strings"
)

// BearerToken reads the token of an "Authorization: Bearer <token>"
// header. The scheme is case-insensitive (RFC 9110, section 11.1):
// "bearer" and "BEARER" are Bearer too.
func BearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	return token, token != ""
}
