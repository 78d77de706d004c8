// Package mediatest makes small well-formed images of every type a media
// store takes, for tests of stores, sessions and model clients.
package mediatest

import (
	"bytes"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
)

// PNG encodes a w×h PNG whose pixels depend on seed, so two seeds make two
// different images.
func PNG(w, h int, seed byte) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, pattern(w, h, seed)); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// JPEG encodes a w×h JPEG.
func JPEG(w, h int, seed byte) []byte {
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, pattern(w, h, seed), nil); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// GIF encodes a w×h GIF.
func GIF(w, h int, seed byte) []byte {
	var buf bytes.Buffer
	if err := gif.Encode(&buf, pattern(w, h, seed), nil); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// WebP is a 1×1 lossless WebP: a RIFF header, the VP8L chunk and its
// padding byte. The standard library encodes no WebP, so it is spelled out.
func WebP() []byte {
	return []byte("RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00")
}

func pattern(w, h int, seed byte) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{R: byte(x) + seed, G: byte(y) ^ seed, B: seed, A: 255})
		}
	}
	return img
}
