#!/usr/bin/env nextflow
/*
 * The flowfs test pipeline (issue 5), Nextflow version. The same steps, with the same
 * commands (workflows/bin/*.sh), as the Snakefile next to it:
 *
 *   INDEX_REF  bwa index + samtools faidx of the reference
 *   TRIM       fastp
 *   ALIGN      bwa mem | samtools view -b
 *   SORT       samtools sort + samtools index
 *   CALL       bcftools mpileup | bcftools call, one task per region of regions.txt (scatter)
 *   CONCAT     bcftools concat of the region VCFs, in region order (gather)
 *   ANNOTATE   bcftools annotate against the big tabix-indexed annot.tsv.gz
 *
 *   nextflow run workflows/main.nf --data DIR [--outdir results] [--threads 2] -w WORK
 *
 * DIR holds what workflows/gen_data.py writes. The final VCF is published (copied) to
 * OUTDIR/annotated.vcf.gz.
 */
nextflow.enable.dsl = 2

params.data = null
params.outdir = 'results'
params.threads = 2

process INDEX_REF {
    input:
    path ref

    output:
    tuple path('genome.fa'), path('genome.fa.*')

    script:
    """
    index_ref.sh ${ref} genome.fa
    """
}

process TRIM {
    cpus params.threads

    input:
    tuple path(r1), path(r2)

    output:
    tuple path('trimmed_1.fq.gz'), path('trimmed_2.fq.gz'), emit: reads
    path 'fastp.json', emit: report

    script:
    """
    trim.sh ${r1} ${r2} trimmed_1.fq.gz trimmed_2.fq.gz fastp.json ${task.cpus}
    """
}

process ALIGN {
    cpus params.threads

    input:
    tuple path(r1), path(r2)
    tuple path(fa), path(idx)

    output:
    path 'aligned.bam'

    script:
    """
    align.sh ${fa} ${r1} ${r2} aligned.bam ${task.cpus}
    """
}

process SORT {
    cpus params.threads

    input:
    path bam

    output:
    tuple path('sample.sorted.bam'), path('sample.sorted.bam.bai')

    script:
    """
    sort.sh ${bam} sample.sorted.bam ${task.cpus}
    """
}

process CALL {
    tag "${region}"

    input:
    tuple path(bam), path(bai)
    tuple path(fa), path(idx)
    tuple val(i), val(region)

    output:
    tuple val(i), path("calls_r${i}.vcf.gz"), path("calls_r${i}.vcf.gz.csi")

    script:
    """
    call_region.sh ${fa} ${bam} ${region} calls_r${i}.vcf.gz
    """
}

process CONCAT {
    input:
    path vcfs
    path csis

    output:
    tuple path('calls.vcf.gz'), path('calls.vcf.gz.csi')

    script:
    """
    concat.sh calls.vcf.gz ${vcfs.join(' ')}
    """
}

process ANNOTATE {
    publishDir params.outdir, mode: 'copy'

    input:
    tuple path(vcf), path(csi)
    tuple path(annot), path(tbi), path(hdr)

    output:
    tuple path('annotated.vcf.gz'), path('annotated.vcf.gz.csi')

    script:
    """
    annotate.sh ${vcf} ${annot} ${hdr} annotated.vcf.gz
    """
}

workflow {
    if (!params.data) {
        error "give --data DIR (the output of workflows/gen_data.py)"
    }
    def data = file(params.data, checkIfExists: true)
    def regions = file("${data}/regions.txt", checkIfExists: true).readLines()*.trim().findAll { it }
    // zero-padded index: the region VCFs sort, and are concatenated, in regions.txt order
    def width = String.valueOf(regions.size()).length()
    def region_ch = Channel.fromList(regions.withIndex().collect { r, i -> tuple(String.valueOf(i).padLeft(width, '0'), r) })

    // the reference is a value channel (its input is a value); the BAM is made one with
    // .first(): every CALL task gets the one reference and the one BAM
    ref = INDEX_REF(file("${data}/ref.fa", checkIfExists: true))
    TRIM(Channel.of(tuple(file("${data}/reads_1.fq.gz", checkIfExists: true),
                          file("${data}/reads_2.fq.gz", checkIfExists: true))))
    ALIGN(TRIM.out.reads, ref)
    bam = SORT(ALIGN.out).first()
    calls = CALL(bam, ref, region_ch)
    gathered = calls.toSortedList { a, b -> a[0] <=> b[0] }
    CONCAT(gathered.map { l -> l.collect { it[1] } }, gathered.map { l -> l.collect { it[2] } })
    ANNOTATE(CONCAT.out, Channel.of(tuple(file("${data}/annot.tsv.gz", checkIfExists: true),
                                          file("${data}/annot.tsv.gz.tbi", checkIfExists: true),
                                          file("${data}/annot.hdr", checkIfExists: true))))
}
