/* device_launch_parameters.h -- many tutorials (and Visual Studio's CUDA template) include this for
 * threadIdx and friends; the qgpu-min prelude already declares them, so it is empty here. */
