package httpserver

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		header, token string
		ok            bool
	}{
		{"Bearer t0ken", "t0ken", true},
		{"bearer t0ken", "t0ken", true},
		{"BEARER t0ken", "t0ken", true},
		{"BeArEr  t0ken", "t0ken", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic dTpw", "", false},
		{"Bearert0ken", "", false},
		{"", "", false},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		tok, ok := BearerToken(r)
		require.Equal(t, tc.ok, ok, tc.header)
		require.Equal(t, tc.token, tok, tc.header)
	}
}
