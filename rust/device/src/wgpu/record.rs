//! Recording into one command encoder: consecutive dispatches share a
//! compute pass, and what the pass has bound is not bound again.

use super::bind_groups::Windows;

/// An encoder being recorded, with the compute pass its dispatches share:
/// consecutive dispatches go in one pass (wgpu orders dispatches in a pass
/// as it orders passes), because wgpu sizes each pass's resource tracking to
/// the most buffers the device ever had alive, so a pass per dispatch makes
/// every op cost more with every live buffer. Copies and clears end the pass.
pub struct Recorder {
    // Dropped before the encoder it locks.
    pass: Option<wgpu::ComputePass<'static>>,
    /// What the open pass has bound: a dispatch of the same pipeline over the
    /// same group (a kernel launched again and again) sets neither again.
    bound: Option<(wgpu::ComputePipeline, wgpu::BindGroup)>,
    /// The kept group the last dispatch bound, with its layout and windows:
    /// a dispatch over the same windows takes it without asking the cache.
    last_group: Option<(wgpu::BindGroupLayout, Windows, wgpu::BindGroup)>,
    encoder: wgpu::CommandEncoder,
}

impl Recorder {
    pub fn new(device: &wgpu::Device) -> Recorder {
        Recorder {
            pass: None,
            bound: None,
            last_group: None,
            encoder: device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None }),
        }
    }

    /// The encoder, for commands outside a compute pass (ends the open one).
    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        self.bound = None;
        &mut self.encoder
    }

    /// The open compute pass (begun if none is) with `pipeline` and `group`
    /// (at group 0) bound.
    pub fn pass_with(
        &mut self,
        pipeline: &wgpu::ComputePipeline,
        group: &wgpu::BindGroup,
    ) -> &mut wgpu::ComputePass<'static> {
        let pass = Self::open_pass(&mut self.pass, &mut self.encoder);
        match &self.bound {
            Some((bound_pipeline, bound_group)) if bound_pipeline == pipeline && bound_group == group => {}
            Some((bound_pipeline, _)) if bound_pipeline == pipeline => pass.set_bind_group(0, group, &[]),
            _ => {
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, group, &[]);
            }
        }
        self.bound = Some((pipeline.clone(), group.clone()));
        pass
    }

    /// The open compute pass with `pipeline` and each of `groups` (by
    /// group index) bound: a kernel with its own layout.
    pub fn pass_with_groups(
        &mut self,
        pipeline: &wgpu::ComputePipeline,
        groups: &[(u32, wgpu::BindGroup)],
    ) -> &mut wgpu::ComputePass<'static> {
        let pass = Self::open_pass(&mut self.pass, &mut self.encoder);
        pass.set_pipeline(pipeline);
        for (index, group) in groups {
            pass.set_bind_group(*index, group, &[]);
        }
        self.bound = None;
        pass
    }

    fn open_pass<'a>(
        pass: &'a mut Option<wgpu::ComputePass<'static>>,
        encoder: &mut wgpu::CommandEncoder,
    ) -> &'a mut wgpu::ComputePass<'static> {
        pass.get_or_insert_with(|| {
            encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None })
                .forget_lifetime()
        })
    }

    /// The kept group of `layout` over `windows`: the one the last dispatch
    /// bound if it is that, else `get`'s (remembered for the next).
    pub fn kept_group(
        &mut self,
        layout: &wgpu::BindGroupLayout,
        windows: Windows,
        get: impl FnOnce(Windows) -> wgpu::BindGroup,
    ) -> wgpu::BindGroup {
        match &self.last_group {
            Some((last_layout, last_windows, group)) if last_layout == layout && *last_windows == windows => {
                group.clone()
            }
            _ => {
                let group = get(windows.clone());
                self.last_group = Some((layout.clone(), windows, group.clone()));
                group
            }
        }
    }

    pub fn finish(mut self) -> wgpu::CommandBuffer {
        self.pass = None;
        self.encoder.finish()
    }
}
