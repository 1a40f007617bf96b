// Byte-string kernels on unsigned char arrays.
__global__ void caesar(const unsigned char *in, unsigned char *out, int shift, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned char c = in[i];
        if (c >= 'a' && c <= 'z')      c = 'a' + (c - 'a' + shift) % 26;
        else if (c >= 'A' && c <= 'Z') c = 'A' + (c - 'A' + shift) % 26;
        out[i] = c;
    }
}

__global__ void to_upper(unsigned char *s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && s[i] >= 'a' && s[i] <= 'z')
        s[i] -= 32;
}
