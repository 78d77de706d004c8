package workerconfig

// MediaStore is where image bytes live.
type MediaStore struct {
	// StoreURI is the location every image URI starts with.
	StoreURI       string                    `json:"storeURI"`
	S3             *S3MediaStore             `json:"s3,omitempty"`
	LocalDirectory *LocalDirectoryMediaStore `json:"localDirectory,omitempty"`
}

// S3MediaStore is a bucket and prefix.
type S3MediaStore struct {
	Bucket          string     `json:"bucket"`
	Prefix          string     `json:"prefix,omitempty"`
	Endpoint        string     `json:"endpoint,omitempty"`
	Region          string     `json:"region,omitempty"`
	ForcePathStyle  bool       `json:"forcePathStyle,omitempty"`
	AccessKeyID     *SecretEnv `json:"accessKeyID,omitempty"`
	SecretAccessKey *SecretEnv `json:"secretAccessKey,omitempty"`
	SessionToken    *SecretEnv `json:"sessionToken,omitempty"`
}

// LocalDirectoryMediaStore is a directory.
type LocalDirectoryMediaStore struct {
	Root string `json:"root"`
}
