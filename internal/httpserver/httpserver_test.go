package httpserver_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/httpserver"
)

func serve(t *testing.T, l httpserver.Limits) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := httpserver.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		fmt.Fprintln(w, "ok")
	}), l)
	go func() { _ = srv.Serve(ln) }() // ends with ErrServerClosed
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// A client that sends its headers and then trickles, or stops sending, its
// body is cut off once the read limit has passed.
func TestSlowBodyIsCutOff(t *testing.T) {
	l := httpserver.Default
	l.Read = 300 * time.Millisecond
	addr := serve(t, l)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = fmt.Fprintf(c, "POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = io.ReadAll(c) // the server closes the connection
	require.NoError(t, err)
}

// Headers over the limit are refused.
func TestHeadersAreBounded(t *testing.T) {
	addr := serve(t, httpserver.Default)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 200<<10))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
}
