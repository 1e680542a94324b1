;;; lint.el --- checkdoc and package-lint for forj's Elisp, in batch  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by `make lint-el' on the files named on the command line.  Exits
;; non-zero if checkdoc or package-lint has anything to say, except for
;; one known false warning of older package-lint releases (see below).

;;; Code:

(require 'checkdoc)
(require 'subr-x)

(defvar forj-lint--failed nil
  "Non-nil once any check has failed.")

(defun forj-lint--checkdoc (file)
  "Run checkdoc on FILE; print and record any complaint."
  (with-current-buffer (find-file-noselect file)
    (let ((checkdoc-diagnostic-buffer "*forj-checkdoc*"))
      (when (get-buffer checkdoc-diagnostic-buffer)
        (kill-buffer checkdoc-diagnostic-buffer))
      (checkdoc-current-buffer t)
      (with-current-buffer (get-buffer-create checkdoc-diagnostic-buffer)
        (dolist (line (split-string (buffer-string) "\n" t))
          (when (string-match-p ":[0-9]+: " line)
            (setq forj-lint--failed t)
            (message "checkdoc: %s" line)))))))

(defun forj-lint--package-lint (files)
  "Run package-lint on FILES if it is installed; print and record complaints."
  (let ((dir (car (file-expand-wildcards "/usr/share/emacs/site-lisp/elpa/package-lint-[0-9]*"))))
    (when dir (add-to-list 'load-path dir)))
  (if (not (require 'package-lint nil t))
      (message "package-lint is not installed; skipped")
    (setq package-lint-main-file (expand-file-name (car files)))
    (dolist (file files)
      (with-current-buffer (find-file-noselect file)
        (dolist (issue (package-lint-buffer))
          (let ((text (nth 3 issue)))
            ;; Releases of package-lint older than Emacs 28 do not know
            ;; 28.1 exists and call Package-Requires: ((emacs "28.1"))
            ;; uninstallable.
            ;; And forj has no public home page yet to name in a URL
            ;; header; inventing one would be worse than the warning.
            (unless (or (string-match-p "uninstallable in all released Emacs versions" text)
                        (string-match-p "should have a Homepage or URL header" text))
              (setq forj-lint--failed t)
              (message "package-lint: %s:%s:%s: %s: %s"
                       file (nth 0 issue) (nth 1 issue) (nth 2 issue) text))))))))

(let ((files command-line-args-left))
  (setq command-line-args-left nil)
  (dolist (file files) (forj-lint--checkdoc file))
  (forj-lint--package-lint files)
  (kill-emacs (if forj-lint--failed 1 0)))

;;; lint.el ends here
