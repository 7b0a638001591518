"""The pipeline: a family's build and publication, one module per stage, in the order they run.

    clean    rs.pipeline.clean     source records -> clean rows (one image, its QA); every drop with its reason
    sample   rs.pipeline.sample    every question answered, read, verified; rejections judged; the judge calibrated
    recover  rs.pipeline.recover   (opt-in) rejected questions sampled again above temperature 0
    route    rs.pipeline.route     each answered item to its splits (think, nothink, rejected), with its reason
    write    rs.pipeline.write     the splits' parquet files, the opt-in repos and the family report
    publish  rs.pipeline.publish   the repos laid out as on the Hub, their cards rendered, pushed

`rs.pipeline.stage` holds the contract every stage implements (`Stage`: its fingerprint, the engine requests it sends,
`run`) and `ensure`, the one lock / current-report / write-then-replace pattern of a stage that keeps a store;
`rs.pipeline.build` runs the stages in order for one family.
"""

STAGES = ("clean", "sample", "recover", "route", "write", "publish")
"""The stages, in the order a build runs them."""
