// FizzBuzz as a class exercise: code 3 = FizzBuzz, 1 = Fizz, 2 = Buzz, else the number itself (1-based).
__global__ void fizzbuzz(int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int v = i + 1;
    if (v % 15 == 0)      out[i] = -3;
    else if (v % 3 == 0)  out[i] = -1;
    else if (v % 5 == 0)  out[i] = -2;
    else                  out[i] = v;
}
