#include "bootstrap/handshake.hpp"

#include "net/socket_util.hpp"

namespace ncclz::bootstrap {

std::vector<uint8_t> frame(uint32_t magic, uint32_t word, const std::vector<uint8_t>& body) {
  Writer w;
  w.u32(magic);
  w.u32(word);
  w.u32(static_cast<uint32_t>(body.size()));
  w.raw(body.data(), body.size());
  return std::move(w.b);
}

std::string RankInfo::describe() const {
  std::string host_name = host_id.substr(0, host_id.find('/'));
  std::string pid = "?";
  size_t at = process_id.find("/pid");
  if (at != std::string::npos) {
    size_t end = process_id.find('/', at + 4);
    pid = process_id.substr(at + 4, end == std::string::npos ? std::string::npos : end - at - 4);
  }
  return "host " + host_name + ", pid " + pid;
}

void put_info(Writer& w, const RankInfo& r) {
  w.str(r.host);
  w.u32(static_cast<uint32_t>(r.port));
  w.str(r.host_id);
  w.str(r.process_id);
}

RankInfo get_info(Reader& rd) {
  RankInfo r;
  r.host = rd.str(256);
  r.port = static_cast<int>(rd.u32());
  r.host_id = rd.str(1024);
  r.process_id = rd.str(1024);
  return r;
}

Writer hello_body(const Hello& h) {
  Writer w;
  w.i32(h.rank);
  w.i32(h.size);
  w.u32(h.generation);
  w.str(h.job_id);
  w.raw(h.nonce.data(), h.nonce.size());
  return w;
}

bool parse_hello(const uint8_t* body, size_t n, Hello* out) {
  Reader rd{body, n};
  out->rank = rd.i32();
  out->size = rd.i32();
  out->generation = rd.u32();
  out->job_id = rd.str(kMaxJobId);
  rd.raw(out->nonce.data(), out->nonce.size());
  return rd.done();
}

namespace {

void put_str(base::HmacSha256& h, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  h.update(&n, 4);
  h.update(s);
}

}  // namespace

Digest root_mac(const std::string& token, const Digest& hello_hash, const Nonce& nonce0, const std::string& job_id0) {
  base::HmacSha256 h(token);
  h.update("ncclz-v2 root", 13);
  h.update(hello_hash.data(), hello_hash.size());
  h.update(nonce0.data(), nonce0.size());
  put_str(h, job_id0);
  return h.final();
}

Digest rank_mac(const std::string& token, const Digest& hello_hash, const Digest& mac0, const uint8_t* info,
                size_t info_len) {
  base::HmacSha256 h(token);
  h.update("ncclz-v2 rank", 13);
  h.update(hello_hash.data(), hello_hash.size());
  h.update(mac0.data(), mac0.size());
  h.update(info, info_len);
  return h.final();
}

Digest table_mac(const std::string& token, const Digest& hello_hash, const Digest& mac0, const uint8_t* table,
                 size_t table_len) {
  base::HmacSha256 h(token);
  h.update("ncclz-v2 table", 14);
  h.update(hello_hash.data(), hello_hash.size());
  h.update(mac0.data(), mac0.size());
  h.update(table, table_len);
  return h.final();
}

Digest p2p_mac(const std::string& token, const std::string& job_key, int32_t src, int32_t dst, const Nonce& nonce) {
  base::HmacSha256 h(token);
  h.update("ncclz-v2 p2p", 12);
  put_str(h, job_key);
  h.update(&src, 4);
  h.update(&dst, 4);
  h.update(nonce.data(), nonce.size());
  return h.final();
}

Nonce random_nonce() {
  Nonce n;
  net::random_bytes(n.data(), n.size());
  return n;
}

bool mac_equal(const uint8_t* a, const Digest& b) { return net::equal_ct(a, kMacBytes, b.data(), b.size()); }

}  // namespace ncclz::bootstrap
