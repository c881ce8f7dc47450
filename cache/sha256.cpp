// sha256.cpp — one-shot SHA-256 with OpenSSL's EVP interface.
#include "cache/sha256.hpp"

#include <openssl/evp.h>

#include "nsajit/errors.hpp"

namespace nsajit {

Sha256Digest sha256(const void* data, std::size_t size) {
  Sha256Digest digest{};
  unsigned int length = 0;
  if (EVP_Digest(data, size, digest.data(), &length, EVP_sha256(), nullptr) != 1 || length != digest.size())
    throw Error("EVP_Digest(SHA-256) failed");
  return digest;
}

std::string to_hex(const Sha256Digest& digest) {
  static const char* const hex = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (unsigned char b : digest) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

}  // namespace nsajit
