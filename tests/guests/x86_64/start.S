// Entry point of the x86_64 bare-metal test guests (qemu-system-x86_64 -M pc): a Multiboot
// (v1) image that QEMU's -kernel loads by the header's addresses (the "a.out kludge", flag
// 16: QEMU refuses to load an ELF64 by its program headers), entered in 32-bit protected
// mode with paging off. It identity-maps the first GiB with 2 MiB pages, enters long mode
// and runs main in 64-bit code, then rt_fini, then leaves QEMU with main's status.

#define MB_MAGIC 0x1badb002
#define MB_FLAGS 0x00010000 // addresses in the header

    .section .text.start, "ax"
    .code32
    .align 4
mb_header:
    .long   MB_MAGIC
    .long   MB_FLAGS
    .long   -(MB_MAGIC + MB_FLAGS)
    .long   mb_header           // header_addr
    .long   __load_start        // load_addr
    .long   __load_end          // load_end_addr
    .long   __bss_end           // bss_end_addr (QEMU zeroes up to here)
    .long   _start32            // entry_addr

    .global _start32
    .type _start32, @function
_start32:
    cli
    // PML4[0] -> PDPT, PDPT[0] -> PD, PD[i] = i * 2 MiB (present, writable, large).
    mov     $pml4, %edi
    mov     $pdpt, %eax
    or      $0x3, %eax
    mov     %eax, (%edi)
    mov     $pdpt, %edi
    mov     $pd, %eax
    or      $0x3, %eax
    mov     %eax, (%edi)
    mov     $pd, %edi
    mov     $0x83, %eax
    mov     $512, %ecx
1:  mov     %eax, (%edi)
    movl    $0, 4(%edi)
    add     $0x200000, %eax
    add     $8, %edi
    loop    1b
    mov     %cr4, %eax
    or      $0x620, %eax        // PAE, OSFXSR, OSXMMEXCPT (GCC may use SSE)
    mov     %eax, %cr4
    mov     $pml4, %eax
    mov     %eax, %cr3
    mov     $0xc0000080, %ecx   // EFER.LME
    rdmsr
    or      $0x100, %eax
    wrmsr
    mov     %cr0, %eax
    and     $~0x4, %eax         // EM off: SSE
    or      $0x80000002, %eax   // PG, MP
    mov     %eax, %cr0
    lgdt    gdt_ptr
    ljmp    $0x08, $_start
    .size _start32, . - _start32

    .code64
    .global _start
    .type _start, @function
_start:
    mov     $0x10, %ax
    mov     %ax, %ds
    mov     %ax, %es
    mov     %ax, %ss
    xor     %eax, %eax
    mov     %ax, %fs
    mov     %ax, %gs
    mov     $__stack_top, %rsp
    // A zero frame pointer ends the frame chain (the oracle relies on main's saved rbp
    // being 0).
    xor     %ebp, %ebp
    call    main
    mov     %eax, %edi
    call    rt_fini             // int rt_fini(int status): returns the exit status
    mov     %eax, %edi
    jmp     rt_exit
    .size _start, . - _start

// void rt_exit(int status): status 0 powers the machine off through ACPI (PIIX4 PM1a_CNT at
// 0x604 as SeaBIOS sets it up, SLP_EN with S5's type 0: QEMU exits 0); any other status
// goes to isa-debug-exit at 0xf4, which ends QEMU with (status << 1) | 1.
    .text
    .global rt_exit
    .type rt_exit, @function
rt_exit:
    test    %edi, %edi
    jnz     1f
    mov     $0x604, %dx
    mov     $0x2000, %ax
    outw    %ax, %dx
1:  mov     %edi, %eax
    outl    %eax, $0xf4
2:  hlt
    jmp     2b
    .size rt_exit, . - rt_exit

    .section .rodata
    .align 8
gdt:
    .quad   0
    .quad   0x00209a0000000000  // 0x08: 64-bit code, ring 0
    .quad   0x0000920000000000  // 0x10: data
gdt_end:
gdt_ptr:
    .word   gdt_end - gdt - 1
    .long   gdt

    .section .bss.pages, "aw", @nobits
    .align 4096
pml4:   .skip 4096
pdpt:   .skip 4096
pd:     .skip 4096

    .section .note.GNU-stack, "", @progbits
