package media

import (
	"bytes"
	"encoding/binary"
)

// Image types a store takes, as MIME types.
const (
	MIMEPNG  = "image/png"
	MIMEJPEG = "image/jpeg"
	MIMEGIF  = "image/gif"
	MIMEWebP = "image/webp"
)

// MIMETypes lists the image types a store takes.
var MIMETypes = []string{MIMEPNG, MIMEJPEG, MIMEGIF, MIMEWebP}

var (
	pngSignature = []byte("\x89PNG\r\n\x1a\n")
	gif87        = []byte("GIF87a")
	gif89        = []byte("GIF89a")
)

// Sniff names the image type of data from a cheap structural check of its
// bytes, not a decode: a PNG signature followed by its IHDR chunk; a JPEG
// start-of-image, a marker after it and end-of-image as the last two
// bytes; a GIF header and logical screen descriptor; a WebP RIFF header
// whose size matches the data, with a VP8, VP8L or VP8X chunk first. It
// returns "" for anything else. Models refuse bytes that are not the type
// the request names, so a store refuses them before they are referenced.
func Sniff(data []byte) string {
	switch {
	case isPNG(data):
		return MIMEPNG
	case isJPEG(data):
		return MIMEJPEG
	case isGIF(data):
		return MIMEGIF
	case isWebP(data):
		return MIMEWebP
	}
	return ""
}

// isPNG: the signature, then a 13-byte IHDR chunk with a non-zero width
// and height, and room for the chunk's CRC.
func isPNG(data []byte) bool {
	const ihdrEnd = 8 + 8 + 13 + 4
	if len(data) < ihdrEnd || !bytes.HasPrefix(data, pngSignature) {
		return false
	}
	if binary.BigEndian.Uint32(data[8:12]) != 13 || string(data[12:16]) != "IHDR" {
		return false
	}
	width, height := binary.BigEndian.Uint32(data[16:20]), binary.BigEndian.Uint32(data[20:24])
	return width != 0 && height != 0
}

// isJPEG: start-of-image (FF D8), a marker segment after it (FF and a
// marker byte other than 00 and FF), and end-of-image (FF D9) at the end.
func isJPEG(data []byte) bool {
	if len(data) < 6 || data[0] != 0xFF || data[1] != 0xD8 {
		return false
	}
	if data[2] != 0xFF || data[3] == 0x00 || data[3] == 0xFF {
		return false
	}
	return data[len(data)-2] == 0xFF && data[len(data)-1] == 0xD9
}

// isGIF: "GIF87a" or "GIF89a" and the 7-byte logical screen descriptor
// with a non-zero width and height.
func isGIF(data []byte) bool {
	if len(data) < 13 || !bytes.HasPrefix(data, gif87) && !bytes.HasPrefix(data, gif89) {
		return false
	}
	width, height := binary.LittleEndian.Uint16(data[6:8]), binary.LittleEndian.Uint16(data[8:10])
	return width != 0 && height != 0
}

// isWebP: "RIFF", a little-endian size that counts every byte after it
// (the data's length less 8), "WEBP", and a first chunk named "VP8 ",
// "VP8L" or "VP8X" whose size fits in the data.
func isWebP(data []byte) bool {
	if len(data) < 20 || string(data[0:4]) != "RIFF" || string(data[8:12]) != "WEBP" {
		return false
	}
	if uint64(binary.LittleEndian.Uint32(data[4:8])) != uint64(len(data)-8) {
		return false
	}
	switch string(data[12:16]) {
	case "VP8 ", "VP8L", "VP8X":
	default:
		return false
	}
	return uint64(binary.LittleEndian.Uint32(data[16:20])) <= uint64(len(data)-20)
}
