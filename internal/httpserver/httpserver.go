// Package httpserver builds the HTTP servers of both binaries with the
// limits every endpoint needs, so that a slow or idle client cannot hold a
// connection, or a goroutine, open without end.
package httpserver

import (
	"net/http"
	"time"
)

// Limits bound one connection.
type Limits struct {
	// ReadHeader and Read bound reading a request's headers and all of it.
	ReadHeader, Read time.Duration
	// Write bounds writing the answer, from the end of the headers read;
	// an endpoint that waits (a kill's grace) needs more than the default.
	Write time.Duration
	// Idle bounds a kept-alive connection between requests.
	Idle time.Duration
	// MaxHeaderBytes bounds the request headers.
	MaxHeaderBytes int
}

// Default are the limits of every gpureclaim server.
var Default = Limits{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: time.Minute, Idle: 2 * time.Minute, MaxHeaderBytes: 64 << 10}

// New returns a server of h with the limits.
func New(h http.Handler, l Limits) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeader,
		ReadTimeout:       l.Read,
		WriteTimeout:      l.Write,
		IdleTimeout:       l.Idle,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}
