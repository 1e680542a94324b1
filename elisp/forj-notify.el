;;; forj-notify.el --- A signal when forj needs you  -*- lexical-binding: t; -*-

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

;; When a review is waiting, the model asks the user a question, or a
;; turn ends, and the user cannot see the chat (it is in no window, or
;; its frame does not have the focus), forj says so: a desktop
;; notification through D-Bus (`notifications-notify'), else through
;; the `alert' package when it is installed, else in the mode line of
;; every window until the chat is selected.  `forj-notify-events' says
;; which of these, `forj-notify-method' how.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)

(declare-function notifications-notify "notifications" (&rest params))
(declare-function dbus-ping "dbus" (bus service &optional timeout))
(declare-function alert "ext:alert" (message &rest settings))

(defcustom forj-notify-events '(review question turn-end)
  "What forj tells you about when you cannot see the chat.
`review': a review waits for your decision; `question': the model
ended its turn with a question to you; `turn-end': the model ended
its turn otherwise.  A turn you stopped yourself is not signalled."
  :type '(set (const :tag "A review is waiting" review)
              (const :tag "The model asks you a question" question)
              (const :tag "A turn ended" turn-end))
  :group 'forj)

(defcustom forj-notify-method 'auto
  "How forj signals what `forj-notify-events' names.
`auto': a desktop notification where D-Bus offers one, else the
`alert' package when it is installed, else the mode line.
`notifications' and `alert' fall back to the mode line when they are
not available; `mode-line' always uses it."
  :type '(choice (const :tag "The best there is: desktop, alert, mode line" auto)
                 (const :tag "Desktop notifications (D-Bus)" notifications)
                 (const :tag "The alert package" alert)
                 (const :tag "The mode line" mode-line))
  :group 'forj)

;;; Whether to signal, and how

(defun forj-notify-unseen-p (buffer)
  "Non-nil when the user cannot see BUFFER now.
It is in no visible window, or the frames showing it do not have the
focus.  A frame whose focus Emacs cannot tell (a terminal that does
not report it) counts as focused: no signal is better than a false one."
  (let ((windows (get-buffer-window-list buffer nil 'visible)))
    (or (null windows)
        (cl-notany (lambda (window) (frame-focus-state (window-frame window))) windows))))

(defvar forj-notify--dbus 'unknown
  "Whether D-Bus offers desktop notifications: t, nil, or `unknown'.
`unknown' until it is first asked.")

(defun forj-notify--dbus-p ()
  "Non-nil when desktop notifications can be sent through D-Bus.
Asked once per Emacs: the answer is kept."
  (when (eq forj-notify--dbus 'unknown)
    (setq forj-notify--dbus
          (and (featurep 'dbusbind)
               (getenv "DBUS_SESSION_BUS_ADDRESS")
               (require 'notifications nil t)
               (condition-case nil
                   (and (dbus-ping :session "org.freedesktop.Notifications" 500) t)
                 (error nil)))))
  forj-notify--dbus)

(defun forj-notify--alert-p ()
  "Non-nil when the `alert' package is installed."
  (and (require 'alert nil t) (fboundp 'alert)))

(defun forj-notify-choose (method dbus alert)
  "The way to signal for METHOD, given whether DBUS and ALERT are available.
One of `notifications', `alert' and `mode-line'."
  (pcase method
    ('auto (cond (dbus 'notifications) (alert 'alert) (t 'mode-line)))
    ('notifications (if dbus 'notifications 'mode-line))
    ('alert (if alert 'alert 'mode-line))
    (_ 'mode-line)))

;;; The mode line

(defvar forj-notify--pending nil
  "Alist: chat buffer -> what the mode line says it needs, newest first.")

(defvar forj-notify-mode-line '(:eval (forj-notify--mode-line-text))
  "The mode line construct of forj's signals, in `global-mode-string'.")
(put 'forj-notify-mode-line 'risky-local-variable t)

(defvar forj-notify--map
  (let ((map (make-sparse-keymap)))
    (define-key map [mode-line mouse-1] #'forj-notify-show)
    map)
  "Keymap of the mode line signal.")

(defun forj-notify--mode-line-text ()
  "Return the mode line's text while a chat waits for the user, or nil."
  (setq forj-notify--pending (cl-remove-if-not (lambda (p) (buffer-live-p (car p)))
                                               forj-notify--pending))
  (when forj-notify--pending
    (propertize (concat " " (cdar forj-notify--pending)
                        (if (cdr forj-notify--pending)
                            (format " (+%d)" (length (cdr forj-notify--pending)))
                          "")
                        " ")
                'face 'mode-line-emphasis
                'help-echo "mouse-1: show the chat (M-x forj-notify-show)"
                'local-map forj-notify--map)))

(defun forj-notify-show ()
  "Show the chat that waits for you, newest first."
  (interactive)
  (let ((buffer (caar forj-notify--pending)))
    (if (buffer-live-p buffer)
        (pop-to-buffer buffer)
      (message "forj: no chat is waiting for you"))))

(defun forj-notify--seen (&rest _)
  "Forget the signals of the chat in the selected window."
  (let ((shown (window-buffer (selected-window))))
    (when (assq shown forj-notify--pending)
      (setq forj-notify--pending (assq-delete-all shown forj-notify--pending))
      (force-mode-line-update t)))
  (unless forj-notify--pending
    (forj-notify--mode-line-off)))

(defun forj-notify--mode-line-on ()
  "Show forj's signals in the mode line, and forget them once seen."
  (unless (memq 'forj-notify-mode-line global-mode-string)
    (setq global-mode-string (append (or global-mode-string '("")) '(forj-notify-mode-line))))
  (add-hook 'window-selection-change-functions #'forj-notify--seen)
  (add-hook 'window-buffer-change-functions #'forj-notify--seen))

(defun forj-notify--mode-line-off ()
  "Take forj's signal out of the mode line."
  (setq global-mode-string (delq 'forj-notify-mode-line global-mode-string))
  (remove-hook 'window-selection-change-functions #'forj-notify--seen)
  (remove-hook 'window-buffer-change-functions #'forj-notify--seen)
  (force-mode-line-update t))

(defun forj-notify--mode-line (buffer text)
  "Say TEXT about BUFFER in the mode line until BUFFER is selected."
  (setq forj-notify--pending (cons (cons buffer text) (assq-delete-all buffer forj-notify--pending)))
  (forj-notify--mode-line-on)
  (force-mode-line-update t))

;;; Signalling

(defun forj-notify (kind buffer text)
  "Signal TEXT, of KIND, about the chat BUFFER if the user cannot see it.
KIND is one of `forj-notify-events'; nothing happens for a kind not
listed there.  Return the way used, or nil."
  (when (and (memq kind forj-notify-events) (buffer-live-p buffer) (forj-notify-unseen-p buffer))
    (let ((how (forj-notify-choose forj-notify-method
                                   (and (memq forj-notify-method '(auto notifications))
                                        (forj-notify--dbus-p))
                                   (and (memq forj-notify-method '(auto alert))
                                        (forj-notify--alert-p)))))
      (condition-case err
          (pcase how
            ('notifications
             (notifications-notify :title "forj" :body text :app-name "Emacs"
                                   :actions '("default" "Show the chat")
                                   :on-action (lambda (&rest _)
                                                (when (buffer-live-p buffer) (pop-to-buffer buffer)))))
            ('alert (alert text :title "forj" :category 'forj))
            (_ (forj-notify--mode-line buffer text)))
        (error
         ;; A desktop that refuses still leaves the mode line.
         (setq how 'mode-line)
         (forj-notify--mode-line buffer text)
         (message "forj: could not send a notification: %s" (error-message-string err))))
      how)))

(defun forj-notify-question-p (reply)
  "Non-nil when the model's REPLY text ends with a question to the user."
  (and (stringp reply)
       (string-match-p "\\?[*_`\"')[:space:]]*\\'" reply)))

(defun forj-notify-turn-ended (reply cancelled)
  "Signal that the current chat's turn ended with the model's REPLY text.
A reply ending with a question is a `question'; else a `turn-end'.
Nothing when CANCELLED (the user stopped the turn)."
  (unless cancelled
    (let ((question (forj-notify-question-p reply)))
      (forj-notify (if question 'question 'turn-end) (current-buffer)
                   (format (if question "forj: the model asks you a question in %s"
                             "forj: your turn in %s")
                           (buffer-name))))))

(provide 'forj-notify)
;;; forj-notify.el ends here
