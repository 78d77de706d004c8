package gateway

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/stepwise-run/stepwise/internal/gatewayapi"
)

//go:embed web
var web embed.FS

// pageHeaders keep the page to its own files: no script, style or frame
// from elsewhere, no inline script a stored message could smuggle in, and
// no other site framing it to trick a click on Approve.
var pageHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"X-Frame-Options":        "DENY",
	"Referrer-Policy":        "no-referrer",
	"Cache-Control":          "no-cache",
}

func (s *Server) pageRoutes(mux *http.ServeMux) {
	files, err := fs.Sub(web, "web")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	static := http.StripPrefix(gatewayapi.PagePath, http.FileServerFS(files))
	mux.Handle("GET "+gatewayapi.PagePath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range pageHeaders {
			w.Header().Set(k, v)
		}
		static.ServeHTTP(w, r)
	}))
	mux.Handle("GET /{$}", http.RedirectHandler(gatewayapi.PagePath, http.StatusFound))
}
