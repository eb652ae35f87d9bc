/* Fused counter hash -> centred uniform, the CPU hot loop of the noise sampler.
 *
 * Computes, for pair rows k in [k0, k1) and elements j in [0, n):
 *
 *     h = lowbias32(pkeys[k] + index[k*index_row_stride + j] * 0x85EBCA6B)   (mod 2^32)
 *     out[k*out_row_stride + j] = 2u - 1,   u = ((h >> 9) + 0.5) * 2^-23
 *
 * exactly what hyperscalees/noise/keys.py (element_bits) and distributions.py
 * (bits_into_noise_) compute with a dozen separate torch ops. Every step is exact in
 * float32, so the values are bit-identical to the torch path; torch.erfinv then turns
 * them into Gaussians. One pass over memory instead of ~17.
 *
 * A NULL index means element j itself (a whole draw: no index array is built).
 * hs_pair_keys computes the per-pair keys of keys.py (pair_keys) in the same pass
 * structure, replacing two dozen small torch ops per parameter.
 *
 * Built by hyperscalees/noise/native.py with the machine's C compiler and loaded with
 * ctypes; the caller releases the GIL and splits rows across threads.
 */
#include <stdint.h>

static inline uint32_t lowbias32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

void hs_centred_uniform(const int32_t *pkeys, int64_t k0, int64_t k1, const int32_t *index,
                        int64_t index_row_stride, int64_t n, float *out, int64_t out_row_stride) {
    for (int64_t k = k0; k < k1; ++k) {
        const uint32_t key = (uint32_t)pkeys[k];
        float *o = out + k * out_row_stride;
        if (index == 0) {
            for (int64_t j = 0; j < n; ++j) {
                const uint32_t h = lowbias32(key + (uint32_t)j * 0x85EBCA6Bu);
                o[j] = (float)(h >> 9) * 0x1p-22f + (0x1p-23f - 1.0f);
            }
            continue;
        }
        const int32_t *ix = index + k * index_row_stride;
        for (int64_t j = 0; j < n; ++j) {
            const uint32_t h = lowbias32(key + (uint32_t)ix[j] * 0x85EBCA6Bu);
            /* 2u - 1 = top * 2^-22 + (2^-23 - 1): both steps exact for a 23-bit top */
            o[j] = (float)(h >> 9) * 0x1p-22f + (0x1p-23f - 1.0f);
        }
    }
}

/* out[k] = lowbias32(lowbias32(pair_k * GOLDEN ^ key) + mixed_key): keys.pair_keys. */
void hs_pair_keys(const int64_t *pairs, int64_t k, uint32_t key, uint32_t mixed_key, int32_t *out) {
    for (int64_t i = 0; i < k; ++i) {
        const uint32_t p = (uint32_t)pairs[i];
        out[i] = (int32_t)lowbias32(lowbias32((p * 0x9E3779B9u) ^ key) + mixed_key);
    }
}
