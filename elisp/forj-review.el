;;; forj-review.el --- Review and approve the tool calls of a batch  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; When a batch has calls that need the user's consent, one review buffer
;; lists them all: each with its risk (high risk marked), its summary and,
;; for edits, the unified diff the worker will apply, across all files of
;; the batch in one place.  Nothing runs until the decisions are
;; committed; leaving the buffer without committing denies everything.
;;
;;   a  approve the call at point      d  deny it
;;   r  deny it with a reason (the model reads the reason)
;;   A  approve all                    D  deny all
;;   C-c C-c  commit the decisions     q  deny all and commit
;;
;; The batch flow (forj-tools.el) opens this buffer and gets the
;; decisions back through a callback.

;;; Code:

(require 'cl-lib)
(require 'diff-mode)
(require 'forj)

(defface forj-review-high-risk
  '((t :inherit error :weight bold))
  "Face for the risk label of high-risk calls."
  :group 'forj)

(defface forj-review-approved
  '((t :inherit success :weight bold))
  "Face for an approved call's state."
  :group 'forj)

(defface forj-review-denied
  '((t :inherit warning :weight bold))
  "Face for a denied call's state."
  :group 'forj)

(defvar-local forj-review--items nil
  "The plan items under review, each a plist from the worker.")

(defvar-local forj-review--decisions nil
  "Hash table: call id -> t (approved) or (deny . REASON).")

(defvar-local forj-review--callback nil
  "Function called once with the decisions.
Its arguments: the approved ids, and an alist of denied ids and reasons.")

(defvar forj-review-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map "a" #'forj-review-approve)
    (define-key map "d" #'forj-review-deny)
    (define-key map "r" #'forj-review-deny-with-reason)
    (define-key map "A" #'forj-review-approve-all)
    (define-key map "D" #'forj-review-deny-all)
    (define-key map "n" #'forj-review-next)
    (define-key map "p" #'forj-review-previous)
    (define-key map (kbd "C-c C-c") #'forj-review-commit)
    (define-key map "q" #'forj-review-quit)
    map)
  "Keymap of `forj-review-mode'.")

(define-derived-mode forj-review-mode special-mode "forj-review"
  "Review the tool calls of a batch before anything runs.

\\{forj-review-mode-map}"
  (setq-local truncate-lines t)
  (add-hook 'kill-buffer-hook #'forj-review--deny-on-kill nil t))

(defun forj-review-open (items callback)
  "Show ITEMS (plan items needing confirmation) for review.
CALLBACK is called once, with the list of approved ids and an alist of
denied ids and reasons, when the decisions are committed.  Return the
review buffer."
  (let ((buffer (generate-new-buffer "*forj-review*")))
    (with-current-buffer buffer
      (forj-review-mode)
      (setq forj-review--items items
            forj-review--decisions (make-hash-table :test #'equal)
            forj-review--callback callback)
      (forj-review--render)
      (goto-char (point-min))
      (forj-review-next))
    (pop-to-buffer buffer)
    buffer))

(defun forj-review--render ()
  "Draw the review buffer from its items and decisions."
  (let ((inhibit-read-only t)
        (line (line-number-at-pos)))
    (erase-buffer)
    (insert (substitute-command-keys
             "Review these tool calls.  \\<forj-review-mode-map>\\[forj-review-approve] approve, \\[forj-review-deny] deny, \\[forj-review-deny-with-reason] deny with a reason, \\[forj-review-approve-all] / \\[forj-review-deny-all] all, \\[forj-review-commit] commit, \\[forj-review-quit] deny all.\n\n"))
    (dolist (item forj-review--items)
      (let* ((id (plist-get item :id))
             (decision (gethash id forj-review--decisions))
             (risk (or (plist-get item :risk) "low"))
             (start (point)))
        (insert (cond ((eq decision t) (propertize "[approved]" 'face 'forj-review-approved))
                      (decision (propertize "[denied]  " 'face 'forj-review-denied))
                      (t "[        ]"))
                " "
                (propertize (format "%-6s" risk) 'face (if (equal risk "high") 'forj-review-high-risk 'bold))
                " " (plist-get item :summary) "\n")
        (when (and (consp decision) (cdr decision))
          (insert "    reason: " (cdr decision) "\n"))
        (when (plist-get item :preview_note)
          (insert "    " (plist-get item :preview_note) "\n"))
        (when (plist-get item :preview)
          (insert (forj-review--diff (plist-get item :preview))))
        (insert "\n")
        (put-text-property start (point) 'forj-review-id id)))
    (goto-char (point-min))
    (forward-line (1- line))))

(defun forj-review--diff (text)
  "TEXT, a unified diff, indented and coloured with `diff-mode' faces."
  (mapconcat
   (lambda (line)
     (concat "    "
             (propertize line 'face
                         (cond ((string-prefix-p "+++" line) 'diff-file-header)
                               ((string-prefix-p "---" line) 'diff-file-header)
                               ((string-prefix-p "@@" line) 'diff-hunk-header)
                               ((string-prefix-p "+" line) 'diff-added)
                               ((string-prefix-p "-" line) 'diff-removed)
                               (t 'diff-context)))
             "\n"))
   (split-string text "\n" t)
   ""))

(defun forj-review--id-at-point ()
  "The id of the call at point, or signal."
  (or (get-text-property (point) 'forj-review-id)
      (user-error "No tool call at point")))

(defun forj-review-decide (id decision)
  "Record DECISION (t, or (deny . REASON)) for call ID, and redraw."
  (puthash id decision forj-review--decisions)
  (forj-review--render))

(defun forj-review-approve ()
  "Approve the call at point."
  (interactive)
  (forj-review-decide (forj-review--id-at-point) t))

(defun forj-review-deny ()
  "Deny the call at point."
  (interactive)
  (forj-review-decide (forj-review--id-at-point) (cons 'deny nil)))

(defun forj-review-deny-with-reason (reason)
  "Deny the call at point and tell the model REASON."
  (interactive (list (read-string "Why deny this call? ")))
  (forj-review-decide (forj-review--id-at-point)
                      (cons 'deny (and (not (string-empty-p reason)) reason))))

(defun forj-review-approve-all ()
  "Approve every call."
  (interactive)
  (dolist (item forj-review--items) (puthash (plist-get item :id) t forj-review--decisions))
  (forj-review--render))

(defun forj-review-deny-all ()
  "Deny every call."
  (interactive)
  (dolist (item forj-review--items)
    (puthash (plist-get item :id) (cons 'deny nil) forj-review--decisions))
  (forj-review--render))

(defun forj-review-next ()
  "Move to the next call."
  (interactive)
  (let ((here (get-text-property (point) 'forj-review-id))
        (pos (point)))
    (while (and pos (equal (get-text-property pos 'forj-review-id) here))
      (setq pos (next-single-property-change pos 'forj-review-id)))
    (when (and pos (not (get-text-property pos 'forj-review-id)))
      (setq pos (next-single-property-change pos 'forj-review-id)))
    (when pos (goto-char pos))))

(defun forj-review-previous ()
  "Move to the previous call."
  (interactive)
  (let ((pos (previous-single-property-change (point) 'forj-review-id)))
    (when pos
      (goto-char pos)
      (unless (get-text-property (point) 'forj-review-id)
        (let ((start (previous-single-property-change (point) 'forj-review-id)))
          (when start (goto-char start)))))))

(defun forj-review-commit ()
  "Hand the decisions to the batch, denying what is undecided."
  (interactive)
  (let ((callback forj-review--callback)
        (approved nil)
        (denied nil))
    (dolist (item forj-review--items)
      (let* ((id (plist-get item :id))
             (decision (gethash id forj-review--decisions)))
        (if (eq decision t)
            (push id approved)
          (push (cons id (or (cdr-safe decision) "")) denied))))
    (setq forj-review--callback nil)
    (let ((buffer (current-buffer)))
      (quit-window nil (get-buffer-window buffer))
      (kill-buffer buffer))
    (when callback (funcall callback (nreverse approved) (nreverse denied)))))

(defun forj-review-quit ()
  "Deny every call and commit."
  (interactive)
  (forj-review-deny-all)
  (forj-review-commit))

(defun forj-review--deny-on-kill ()
  "Leaving the buffer without committing denies everything."
  (when forj-review--callback
    (let ((callback forj-review--callback))
      (setq forj-review--callback nil)
      (funcall callback nil (mapcar (lambda (item) (cons (plist-get item :id) ""))
                                    forj-review--items)))))

(provide 'forj-review)
;;; forj-review.el ends here
